// The server view: facts and settings (/ui/api/server), the live log, recent requests and the activity chart.
import { getJSON } from './api.js';
import { $, bytes, clock, h } from './util.js';

const MAX_LOG = 500;
const MAX_REQUESTS = 200;
let series = [];

export async function refreshServer() {
  const info = await getJSON('/ui/api/server');
  const runner = info.runner || {};
  const build = runner.built?.[runner.variant] || {};
  const devices = info.devices.length
    ? info.devices.map((d) => `${d.name} (${bytes(d.free)} free of ${bytes(d.total)})`).join('; ')
    : 'CPU only';
  const facts = [
    ['Version', info.version],
    ['Runner', runner.variant ? `${runner.variant}${build.llama_cpp_version ? ` (llama.cpp ${build.llama_cpp_version})` : ''}` : (runner.problem || 'none built')],
    ['Runners built', Object.keys(runner.built || {}).join(', ') || 'none'],
    ['Devices', devices],
    ['Memory', `${bytes(info.memory.free)} free of ${bytes(info.memory.total)}`],
    ['Loaded models', info.loaded],
  ];
  $('#server-info').replaceChildren(...facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))]));
  $('#settings-table tbody').replaceChildren(...Object.entries(info.settings).map(([k, v]) =>
    h('tr', {}, h('th', {}, k), h('td', {}, String(v)))));
}

export function addLog(line) {
  const box = $('#log');
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.append(h('div', { class: `line ${line.level.toLowerCase()}` },
    h('span', { class: 'time' }, clock(line.time)), ' ',
    h('span', { class: 'level' }, line.level), ' ',
    h('span', { class: 'source' }, line.source), ' ', line.msg));
  while (box.childElementCount > MAX_LOG) box.firstElementChild.remove();
  if (atBottom) box.scrollTop = box.scrollHeight;
}

// A request that just finished counts in the chart's current bucket until the server's next series arrives.
function countInSeries(r) {
  const last = series[series.length - 1];
  if (!last || r.time < last.start) return;
  last.requests += 1;
  if (r.tokens_per_second) {
    const seconds = (last.eval_seconds ?? (last.tokens_per_second ? last.eval_tokens / last.tokens_per_second : 0))
      + r.eval_tokens / r.tokens_per_second;
    last.eval_tokens += r.eval_tokens;
    last.eval_seconds = seconds;
    last.tokens_per_second = last.eval_tokens / seconds;
  }
  drawChart();
}

export function addRequest(r, live = false) {
  if (live) countInSeries(r);
  const body = $('#requests-table tbody');
  body.prepend(h('tr', { class: r.status >= 400 ? 'failed' : '' },
    h('td', {}, clock(r.time)), h('td', {}, r.method), h('td', {}, r.path), h('td', {}, r.model || ''),
    h('td', {}, r.status), h('td', {}, `${r.duration.toFixed(3)} s`),
    h('td', {}, r.eval_tokens !== undefined ? `${r.prompt_tokens} → ${r.eval_tokens}` : ''),
    h('td', {}, r.tokens_per_second !== undefined ? r.tokens_per_second.toFixed(1) : '')));
  while (body.childElementCount > MAX_REQUESTS) body.lastElementChild.remove();
}

export function setSeries(points) {
  series = points;
  drawChart();
}

function drawChart() {
  const canvas = $('#chart');
  const ctx = canvas.getContext('2d');
  const W = canvas.width; const H = canvas.height; const pad = 28;
  ctx.clearRect(0, 0, W, H);
  const styles = getComputedStyle(document.body);
  const fg = styles.getPropertyValue('--muted').trim() || '#888';
  ctx.strokeStyle = fg; ctx.fillStyle = fg; ctx.font = '11px sans-serif';
  ctx.beginPath(); ctx.moveTo(pad, H - pad); ctx.lineTo(W - 4, H - pad); ctx.stroke();
  if (!series.length) return;
  const maxReq = Math.max(1, ...series.map((p) => p.requests));
  const maxTps = Math.max(1, ...series.map((p) => p.tokens_per_second));
  const step = (W - pad - 4) / series.length;
  ctx.fillStyle = styles.getPropertyValue('--req').trim() || '#9ab';
  series.forEach((p, i) => {
    const bh = ((H - 2 * pad) * p.requests) / maxReq;
    ctx.fillRect(pad + i * step + 1, H - pad - bh, Math.max(step - 2, 1), bh);
  });
  ctx.strokeStyle = styles.getPropertyValue('--tps').trim() || '#36c';
  ctx.lineWidth = 2;
  ctx.beginPath();
  let started = false;
  series.forEach((p, i) => {
    if (!p.tokens_per_second) return;
    const x = pad + (i + 0.5) * step;
    const y = H - pad - ((H - 2 * pad) * p.tokens_per_second) / maxTps;
    if (started) ctx.lineTo(x, y); else { ctx.moveTo(x, y); started = true; }
    ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(x - 2, y - 2, 4, 4);
  });
  ctx.stroke();
  ctx.lineWidth = 1;
  ctx.fillStyle = fg;
  ctx.fillText(`${maxTps.toFixed(0)} tok/s`, 2, pad - 8);
  ctx.fillText(`${maxReq} req`, W - 50, pad - 8);
  ctx.fillText('-15 min', pad, H - 10);
  ctx.fillText('now', W - 28, H - 10);
}
