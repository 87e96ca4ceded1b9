// Small DOM and formatting helpers. Text always goes in as text (textContent), never as HTML.

export const $ = (sel, root = document) => root.querySelector(sel);

// h('td', {class: 'x', onclick: fn}, 'text', child): an element with attributes, listeners and children.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function bytes(n) {
  if (!n) return '0 B';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  const i = Math.min(Math.floor(Math.log(n) / Math.log(1000)), units.length - 1);
  return `${(n / 1000 ** i).toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function ago(iso) {
  const s = (Date.now() - new Date(iso).getTime()) / 1000;
  if (!Number.isFinite(s)) return '';
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} minutes ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} hours ago`;
  return `${Math.floor(s / 86400)} days ago`;
}

export function until(iso) {
  const t = new Date(iso).getTime();
  if (!Number.isFinite(t)) return '';
  const s = (t - Date.now()) / 1000;
  if (s > 100 * 365 * 86400) return 'forever';
  if (s <= 0) return 'now';
  if (s < 60) return `${Math.round(s)} seconds`;
  if (s < 3600) return `${Math.round(s / 60)} minutes`;
  return `${(s / 3600).toFixed(1)} hours`;
}

export function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

// A modal confirmation (or, with a default value, a one-line prompt): resolves true/false or the text.
export function ask(message, { value = null, ok = 'OK' } = {}) {
  const dialog = $('#confirm-dialog');
  const input = $('#confirm-input');
  $('#confirm-text').textContent = message;
  $('#confirm-ok').textContent = ok;
  input.hidden = value === null;
  input.value = value ?? '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      const yes = dialog.returnValue === 'ok';
      resolve(value === null ? yes : (yes ? input.value.trim() : null));
    }, { once: true });
    dialog.returnValue = '';
    dialog.showModal();
    if (value !== null) input.select();
  });
}
