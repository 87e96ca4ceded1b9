// The models view: /api/tags, /api/show, copy, delete, pull with a bar per layer and cancel, create.
import { getJSON, ndjson, postJSON, request } from './api.js';
import { $, ago, ask, bytes, h } from './util.js';

let onChange = () => {};
let pulling = null; // AbortController of the pull in progress

export async function refreshModels() {
  const { models } = await getJSON('/api/tags');
  const rows = models.map((m) => h('tr', { 'data-model': m.name },
    h('td', {}, m.name),
    h('td', {}, bytes(m.size)),
    h('td', {}, m.details?.family || ''),
    h('td', {}, m.details?.parameter_size || ''),
    h('td', {}, m.details?.quantization_level || ''),
    h('td', { title: m.modified_at }, ago(m.modified_at)),
    h('td', { class: 'actions' },
      h('button', { type: 'button', class: 'secondary', onclick: () => details(m.name) }, 'Details'),
      h('button', { type: 'button', class: 'secondary', onclick: () => copy(m.name) }, 'Copy'),
      h('button', { type: 'button', class: 'danger', onclick: () => remove(m.name) }, 'Delete'))));
  $('#models-table tbody').replaceChildren(...rows);
  $('#models-empty').hidden = models.length > 0;
  return models;
}

function section(title, text) {
  return text ? [h('h3', {}, title), h('pre', { class: 'block' }, text)] : [];
}

async function details(name) {
  const panel = $('#model-details');
  panel.hidden = false;
  panel.replaceChildren(h('p', { class: 'muted' }, `Loading ${name}…`));
  try {
    const info = await postJSON('/api/show', { model: name });
    const d = info.details || {};
    const facts = [['Family', d.family], ['Parameters', d.parameter_size], ['Quantization', d.quantization_level],
      ['Format', d.format], ['Capabilities', (info.capabilities || []).join(', ')],
      ['Context length', Object.entries(info.model_info || {}).find(([k]) => k.endsWith('.context_length'))?.[1]]];
    panel.replaceChildren(
      h('div', { class: 'row spread' }, h('h2', {}, name),
        h('button', { type: 'button', class: 'secondary', onclick: () => { panel.hidden = true; } }, 'Close')),
      h('dl', { class: 'facts' }, facts.filter(([, v]) => v !== undefined && v !== '').flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
      ...section('Parameters', info.parameters),
      ...section('System', info.system),
      ...section('Template', info.template),
      ...section('License', info.license),
      ...section('Modelfile', info.modelfile));
  } catch (e) {
    panel.replaceChildren(h('p', { class: 'error' }, String(e.message || e)));
  }
}

async function copy(name) {
  const destination = await ask(`Copy ${name} to:`, { value: `${name.split(':')[0]}-copy`, ok: 'Copy' });
  if (!destination) return;
  try {
    await request('/api/copy', { method: 'POST', json: { source: name, destination } });
  } catch (e) {
    await ask(`Copy failed: ${e.message}`);
  }
  await changed();
}

async function remove(name) {
  if (!(await ask(`Delete ${name}? Its files are removed unless another model uses them.`, { ok: 'Delete' }))) return;
  try {
    await request('/api/delete', { method: 'DELETE', json: { model: name } });
  } catch (e) {
    await ask(`Delete failed: ${e.message}`);
  }
  $('#model-details').hidden = true;
  await changed();
}

async function changed() {
  await refreshModels();
  onChange();
}

function layerRow(digest) {
  let row = document.getElementById(`layer-${digest}`);
  if (!row) {
    row = h('div', { class: 'layer', id: `layer-${digest}` },
      h('span', { class: 'digest' }, digest.replace('sha256:', '').slice(0, 12)),
      h('progress', { max: 100, value: 0 }),
      h('span', { class: 'pct' }, '0 %'),
      h('span', { class: 'sizes muted' }, ''));
    $('#pull-layers').append(row);
  }
  return row;
}

async function pull(e) {
  e.preventDefault();
  const model = $('#pull-name').value.trim();
  if (!model || pulling) return;
  const controller = new AbortController();
  pulling = controller;
  $('#pull-layers').replaceChildren();
  $('#pull-status').textContent = `pulling ${model}…`;
  $('#pull-status').className = 'status';
  $('#pull-start').disabled = true;
  $('#pull-cancel').hidden = false;
  try {
    for await (const p of ndjson('/api/pull', { model, insecure: $('#pull-insecure').checked, stream: true }, controller.signal)) {
      if (p.digest && p.total) {
        const row = layerRow(p.digest);
        const pct = Math.floor((100 * (p.completed || 0)) / p.total);
        row.querySelector('progress').value = pct;
        row.querySelector('.pct').textContent = `${pct} %`;
        row.querySelector('.sizes').textContent = `${bytes(p.completed || 0)} / ${bytes(p.total)}`;
      }
      $('#pull-status').textContent = p.status;
    }
    $('#pull-status').classList.add('ok');
  } catch (err) {
    $('#pull-status').textContent = controller.signal.aborted ? 'canceled' : `error: ${err.message}`;
    $('#pull-status').classList.add('error');
  } finally {
    pulling = null;
    $('#pull-start').disabled = false;
    $('#pull-cancel').hidden = true;
    await changed();
  }
}

async function create(e) {
  e.preventDefault();
  const model = $('#create-name').value.trim();
  const status = $('#create-status');
  status.className = 'status';
  status.textContent = '';
  $('#create-start').disabled = true;
  try {
    const fields = await postJSON('/ui/api/modelfile', { modelfile: $('#create-modelfile').value });
    for await (const p of ndjson('/api/create', { model, ...fields, stream: true })) {
      status.textContent += `${p.status}\n`;
    }
    status.classList.add('ok');
  } catch (err) {
    status.textContent += `error: ${err.message}\n`;
    status.classList.add('error');
  } finally {
    $('#create-start').disabled = false;
    await changed();
  }
}

export function initModels(changedCallback) {
  onChange = changedCallback;
  $('#pull-form').addEventListener('submit', pull);
  $('#pull-cancel').addEventListener('click', () => pulling?.abort());
  $('#create-form').addEventListener('submit', create);
}
