// The console's entry point: views by URL hash, the API-key dialog, and the one live stream from the server.
import { apiKey, onKeyNeeded, setApiKey, sse } from './api.js';
import { initChat, refreshModels as refreshChatModels } from './chat.js';
import { initModels, refreshModels } from './models.js';
import { initRunning, setLoadable, showRunning } from './running.js';
import { addLog, addRequest, refreshServer, setSeries } from './server.js';
import { $ } from './util.js';

const VIEWS = ['chat', 'models', 'running', 'server'];
let keyPrompt = null;

// One dialog however many requests were refused at once; resolves when the user gave a key.
function askForKey(refused) {
  if (!keyPrompt) {
    keyPrompt = new Promise((resolve) => {
      const dialog = $('#key-dialog');
      $('#key-error').hidden = !refused;
      $('#key-input').value = '';
      $('#key-form').addEventListener('submit', () => {
        setApiKey($('#key-input').value.trim());
        keyPrompt = null;
        resolve();
      }, { once: true });
      dialog.addEventListener('cancel', (e) => e.preventDefault()); // no data without a key: nothing to go back to
      dialog.showModal();
      $('#key-input').focus();
    });
  }
  return keyPrompt;
}

function report(e) { console.error(e); }

async function refreshModelLists() {
  const models = await refreshModels();
  setLoadable(models.map((m) => m.name));
  await refreshChatModels();
}

function show(view) {
  if (!VIEWS.includes(view)) view = 'chat';
  for (const v of VIEWS) $(`#view-${v}`).hidden = v !== view;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === view);
  if (view === 'models' || view === 'chat' || view === 'running') refreshModelLists().catch(report);
  if (view === 'server') refreshServer().catch(report);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function liveStream() {
  for (;;) {
    try {
      for await (const { event, data } of sse('/ui/api/events')) {
        try {
          handle(event, data);
        } catch (e) {
          report(e); // one view's bug must not cut the stream every other view lives on
        }
      }
    } catch (e) {
      report(e);
    }
    $('#conn').textContent = 'disconnected';
    $('#conn').className = 'conn down';
    await sleep(2000);
  }
}

function handle(event, data) {
  if (event === 'hello') {
    $('#conn').textContent = 'live';
    $('#conn').className = 'conn live';
    $('#log').replaceChildren();
    $('#requests-table tbody').replaceChildren();
    data.logs.forEach(addLog);
    data.requests.forEach((r) => addRequest(r));
    setSeries(data.series);
  } else if (event === 'log') addLog(data);
  else if (event === 'request') addRequest(data, true);
  else if (event === 'series') setSeries(data);
  else if (event === 'ps') showRunning(data.models || []);
}

function start() {
  onKeyNeeded(askForKey);
  initChat();
  initModels(() => refreshModelLists().catch(report));
  initRunning();
  window.addEventListener('hashchange', () => show(location.hash.slice(1)));
  show(location.hash.slice(1));
  liveStream();
  if (apiKey()) document.body.dataset.key = 'set';
}

start();
