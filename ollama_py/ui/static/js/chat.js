// The chat view: conversations kept in localStorage, answers streamed from /api/chat, stop, options, images.
import { getJSON, ndjson, postJSON } from './api.js';
import { renderMarkdown } from './markdown.js';
import { $, h } from './util.js';

const STORE = 'ollama-py.chats';
const CURRENT = 'ollama-py.current-chat';

let chats = [];
let currentId = null;
let running = null; // {controller, chatId} while an answer streams
let attachments = []; // base64 images and sounds for the next message
const capabilities = new Map(); // model -> its capabilities (from /api/show)

function load() {
  try { chats = JSON.parse(localStorage.getItem(STORE) || '[]'); } catch { chats = []; }
  if (!Array.isArray(chats)) chats = [];
  currentId = localStorage.getItem(CURRENT);
  if (!chats.some((c) => c.id === currentId)) currentId = chats[0]?.id ?? null;
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(chats));
    localStorage.setItem(CURRENT, currentId ?? '');
  } catch (e) {
    console.warn('could not keep the conversations in localStorage', e); // quota: large images
  }
}

function current() { return chats.find((c) => c.id === currentId) ?? null; }

function newChat() {
  const chat = { id: crypto.randomUUID(), title: 'New chat', model: $('#chat-model').value, system: '',
    options: {}, think: true, messages: [], updated: Date.now() };
  chats.unshift(chat);
  currentId = chat.id;
  save();
  return chat;
}

function renderList() {
  const list = $('#chat-list');
  list.replaceChildren(...chats.map((c) => h('li', { class: c.id === currentId ? 'active' : '' },
    h('a', { href: '#chat', onclick: (e) => { e.preventDefault(); select(c.id); } }, c.title),
    h('button', { type: 'button', class: 'icon', title: 'delete this conversation',
      onclick: () => remove(c.id) }, '×'))));
}

function remove(id) {
  chats = chats.filter((c) => c.id !== id);
  if (currentId === id) currentId = chats[0]?.id ?? null;
  save();
  renderList();
  renderChat();
}

function select(id) {
  currentId = id;
  save();
  renderList();
  renderChat();
}

function statsLine(stats) {
  const tps = stats.eval_duration ? stats.eval_count / (stats.eval_duration / 1e9) : 0;
  const ttft = ((stats.load_duration || 0) + (stats.prompt_eval_duration || 0)) / 1e9;
  return `${stats.eval_count} tokens · ${tps.toFixed(1)} tokens/s · first token after ${ttft.toFixed(2)} s` +
    ` · prompt ${stats.prompt_eval_count ?? 0} tokens`;
}

function messageElement(msg) {
  const el = h('div', { class: `msg ${msg.role}` }, h('div', { class: 'role' }, msg.role));
  if (msg.thinking) {
    const details = h('details', { class: 'thinking' }, h('summary', {}, 'Thinking'));
    details.append(h('div', { class: 'thinking-text' }, msg.thinking));
    el.append(details);
  }
  const content = h('div', { class: 'content' });
  if (msg.role === 'assistant') renderMarkdown(content, msg.content);
  else content.textContent = msg.content;
  el.append(content);
  for (const item of msg.images || []) el.append(mediaElement(item, 'attached file'));
  if (msg.progress != null && !msg.content && !msg.thinking) {
    el.append(h('div', { class: 'note prompt-progress' }, `processing prompt ${msg.progress} %`));
  }
  if (msg.stopped) el.append(h('div', { class: 'note' }, 'stopped'));
  if (msg.error) el.append(h('div', { class: 'error' }, msg.error));
  if (msg.stats) el.append(h('div', { class: 'stats' }, statsLine(msg.stats)));
  return el;
}

function renderChat() {
  const chat = current();
  const box = $('#messages');
  if (!chat) {
    const none = $('#chat-model').options.length === 0;
    box.replaceChildren(none
      ? h('p', { class: 'muted hint' }, 'There is no local model yet: ', h('a', { href: '#models' }, 'pull or create one'),
        ' on the Models page, then come back here to chat with it.')
      : h('p', { class: 'muted hint' }, 'Pick a model and send a message.'));
    return;
  }
  box.replaceChildren(...chat.messages.map(messageElement));
  box.scrollTop = box.scrollHeight;
  $('#opt-system').value = chat.system || '';
  for (const k of ['temperature', 'num_ctx', 'seed']) $(`#opt-${k}`).value = chat.options?.[k] ?? '';
  $('#opt-think').checked = chat.think !== false;
  if (chat.model && [...$('#chat-model').options].some((o) => o.value === chat.model)) {
    $('#chat-model').value = chat.model;
    modelChanged();
  }
}

function readSettings(chat) {
  chat.system = $('#opt-system').value;
  chat.options = {};
  for (const k of ['temperature', 'num_ctx', 'seed']) {
    const v = $(`#opt-${k}`).value;
    if (v !== '') chat.options[k] = Number(v);
  }
  chat.think = $('#opt-think').checked;
}

// An attached file's audio type by its first bytes (WAV, MP3, FLAC: as the server tells a sound from an image),
// else null (an image).
function audioType(b64) {
  const head = atob(b64.slice(0, 16));
  if (head.startsWith('RIFF') && head.slice(8, 12) === 'WAVE') return 'audio/wav';
  if (head.startsWith('ID3') || (head.charCodeAt(0) === 0xff && (head.charCodeAt(1) & 0xe0) === 0xe0)) return 'audio/mpeg';
  if (head.startsWith('fLaC')) return 'audio/flac';
  return null;
}

function mediaElement(b64, name) {
  const audio = audioType(b64);
  return audio
    ? h('audio', { class: 'clip', controls: true, src: `data:${audio};base64,${b64}`, title: name })
    : h('img', { class: 'thumb', src: `data:image/*;base64,${b64}`, alt: name });
}

async function modelChanged() {
  const model = $('#chat-model').value;
  if (!model) return;
  if (!capabilities.has(model)) { // the promise is kept, so views refreshing at once ask the server once
    capabilities.set(model, postJSON('/api/show', { model }).then((info) => info.capabilities || [], () => []));
  }
  const caps = await capabilities.get(model);
  $('#think-row').hidden = !caps.includes('thinking');
  const vision = caps.includes('vision'), audio = caps.includes('audio');
  $('#attach-label').hidden = !vision && !audio; // a multimodal model takes images, sounds or both
  $('#attach-label').firstChild.textContent = vision && audio ? 'Image/Audio ' : audio ? 'Audio ' : 'Image ';
  $('#attach').accept = [vision && 'image/*', audio && 'audio/*'].filter(Boolean).join(',');
}

function setRunning(on) {
  $('#send').hidden = on;
  $('#stop').hidden = !on;
}

async function send(text) {
  const model = $('#chat-model').value;
  if (!model || running) return;
  const chat = current() ?? newChat();
  readSettings(chat);
  chat.model = model;
  const user = { role: 'user', content: text };
  if (attachments.length) user.images = attachments;
  attachments = [];
  $('#attachments').replaceChildren();
  chat.messages.push(user);
  if (chat.title === 'New chat') chat.title = text.slice(0, 40) || 'Image';
  const answer = { role: 'assistant', content: '' };
  const history = chat.messages.map(({ role, content, images }) => (images ? { role, content, images } : { role, content }));
  chat.messages.push(answer);
  chat.updated = Date.now();
  save();
  renderList();
  renderChat();

  const box = $('#messages');
  let el = box.lastElementChild;
  let pending = false;
  const redraw = () => {
    pending = false;
    const fresh = messageElement(answer);
    el.replaceWith(fresh);
    el = fresh;
    box.scrollTop = box.scrollHeight;
  };
  const body = { model, messages: chat.system ? [{ role: 'system', content: chat.system }, ...history] : history,
    stream: true, options: chat.options, prompt_progress: true };
  if (!$('#think-row').hidden) body.think = chat.think;
  const controller = new AbortController();
  running = { controller, chatId: chat.id };
  setRunning(true);
  try {
    for await (const chunk of ndjson('/api/chat', body, controller.signal)) {
      if (chunk.prompt_progress) {
        const { processed, total } = chunk.prompt_progress;
        answer.progress = total ? Math.floor((100 * processed) / total) : 0;
      }
      answer.content += chunk.message?.content || '';
      if (chunk.message?.thinking) answer.thinking = (answer.thinking || '') + chunk.message.thinking;
      if (chunk.done) answer.stats = chunk;
      if (!pending) { pending = true; requestAnimationFrame(redraw); }
    }
  } catch (e) {
    if (controller.signal.aborted) answer.stopped = true;
    else answer.error = String(e.message || e);
  } finally {
    delete answer.progress;
    if (answer.stats) {
      const { eval_count, eval_duration, load_duration, prompt_eval_count, prompt_eval_duration } = answer.stats;
      answer.stats = { eval_count, eval_duration, load_duration, prompt_eval_count, prompt_eval_duration };
    }
    running = null;
    setRunning(false);
    save();
    if (currentId === chat.id) redraw();
  }
}

export async function refreshModels() {
  const select = $('#chat-model');
  const before = select.value || current()?.model;
  const { models } = await getJSON('/api/tags');
  select.replaceChildren(...models.map((m) => h('option', { value: m.name }, m.name)));
  if (before && models.some((m) => m.name === before)) select.value = before;
  if (!current()) renderChat();
  await modelChanged();
}

export function initChat() {
  load();
  renderList();
  renderChat();
  $('#new-chat').addEventListener('click', () => { newChat(); renderList(); renderChat(); $('#prompt').focus(); });
  $('#toggle-settings').addEventListener('click', () => { $('#chat-settings').hidden = !$('#chat-settings').hidden; });
  $('#chat-model').addEventListener('change', modelChanged);
  $('#chat-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('#prompt').value.trim();
    if (!text && !attachments.length) return;
    $('#prompt').value = '';
    send(text);
  });
  $('#prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('#chat-form').requestSubmit();
    }
  });
  $('#stop').addEventListener('click', () => running?.controller.abort());
  $('#attach').addEventListener('change', async (e) => {
    for (const file of e.target.files) {
      const data = await new Promise((resolve) => {
        const reader = new FileReader();
        reader.onload = () => resolve(String(reader.result).split(',', 2)[1]);
        reader.readAsDataURL(file);
      });
      attachments.push(data);
      $('#attachments').append(mediaElement(data, file.name));
    }
    e.target.value = '';
  });
}
