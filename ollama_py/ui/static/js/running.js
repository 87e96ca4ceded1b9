// The running view: what /api/ps shows (pushed by the live stream when it changes), unload and load buttons
// (/api/unload, and /api/load with its progress).
import { ndjson, request } from './api.js';
import { $, bytes, h, until } from './util.js';

let last = [];

function processor(m) {
  if (!m.size) return '';
  const gpu = Math.round((100 * (m.size_vram || 0)) / m.size);
  if (gpu >= 100) return '100% GPU';
  if (gpu <= 0) return '100% CPU';
  return `${100 - gpu}%/${gpu}% CPU/GPU`;
}

async function unload(name, button) {
  button.disabled = true;
  button.textContent = 'Unloading…';
  try {
    await request('/api/unload', { method: 'POST', json: { model: name } }); // answers once it has stopped
  } catch (e) {
    $('#load-status').textContent = `unload failed: ${e.message}`;
  }
}

export function showRunning(models) {
  last = models;
  const rows = models.map((m) => {
    const button = h('button', { type: 'button', class: 'danger' }, 'Unload');
    button.addEventListener('click', () => unload(m.name, button));
    return h('tr', { 'data-model': m.name },
      h('td', {}, m.name),
      h('td', {}, bytes(m.size)),
      h('td', { title: [m.devices || []].flat().join(', ') }, processor(m) + (m.embedding ? ' (embeddings)' : '')),
      h('td', {}, m.context_length ?? ''),
      h('td', {}, m.state ?? ''),
      h('td', { title: m.expires_at }, until(m.expires_at)),
      h('td', { class: 'actions' }, button));
  });
  $('#ps-table tbody').replaceChildren(...rows);
  $('#ps-empty').hidden = models.length > 0;
}

export function setLoadable(names) {
  const select = $('#load-model');
  const before = select.value;
  select.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
  if (names.includes(before)) select.value = before;
}

export function initRunning() {
  setInterval(() => showRunning(last), 5000); // the "until" column counts down
  $('#load-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const model = $('#load-model').value;
    const raw = $('#load-keepalive').value.trim();
    const keep_alive = /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : (raw || undefined);
    $('#load-status').textContent = `loading ${model}…`;
    try {
      // /api/load's lines: {status, completed, total} while it loads (bytes of the weights), then the entry.
      for await (const ev of ndjson('/api/load', { model, keep_alive })) {
        if (ev.status === 'success') break;
        const share = ev.status === 'loading model' && ev.total
          ? ` ${Math.floor((100 * ev.completed) / ev.total)} %` : '';
        $('#load-status').textContent = `${ev.status} ${model}${share}…`;
      }
      $('#load-status').textContent = `${model} loaded`;
    } catch (err) {
      $('#load-status').textContent = `load failed: ${err.message}`;
    }
  });
}
