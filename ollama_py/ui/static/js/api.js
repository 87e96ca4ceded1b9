// Talking to the server: the public API with the API key (when the server wants one), NDJSON and SSE streams.

const KEY = 'ollama-py.key';

export class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

let askKey = null; // set by main.js: () => Promise<void>, resolves once the user entered a key

export function onKeyNeeded(fn) { askKey = fn; }
export function apiKey() { return sessionStorage.getItem(KEY) || ''; }
export function setApiKey(key) { sessionStorage.setItem(KEY, key); }

async function send(path, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    opts = { ...opts, body: JSON.stringify(opts.json) };
  }
  return fetch(path, { ...opts, headers });
}

// fetch with the key; on 401 asks for a key once and tries again. Throws HttpError for other failures.
export async function request(path, opts = {}) {
  let resp = await send(path, opts);
  while (resp.status === 401 && askKey) {
    await askKey(apiKey() !== '');
    resp = await send(path, opts);
  }
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try { const body = await resp.json(); if (body.error) message = body.error; } catch { /* not JSON */ }
    throw new HttpError(resp.status, message);
  }
  return resp;
}

export async function getJSON(path) { return (await request(path)).json(); }
export async function postJSON(path, body, opts = {}) {
  return (await request(path, { method: 'POST', json: body, ...opts })).json();
}

async function* lines(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        yield buf.slice(0, nl);
        buf = buf.slice(nl + 1);
      }
    }
    if (buf) yield buf;
  } finally {
    // A reader that stops early must close the response: an open stream holds one of the few connections
    // a browser allows per server, and enough of them stall every other request of the page.
    reader.cancel().catch(() => {});
  }
}

// An NDJSON stream (/api/chat, /api/pull, /api/create): yields each object; an {"error"} line throws.
export async function* ndjson(path, body, signal) {
  const resp = await request(path, { method: 'POST', json: body, signal });
  for await (const line of lines(resp)) {
    if (!line.trim()) continue;
    const obj = JSON.parse(line);
    if (obj.error) throw new Error(obj.error);
    yield obj;
  }
}

// Server-Sent Events read with fetch (EventSource cannot send an Authorization header): yields {event, data}.
export async function* sse(path, signal) {
  const resp = await request(path, { signal, headers: { Accept: 'text/event-stream' } });
  let event = 'message';
  let data = [];
  for await (const raw of lines(resp)) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (line === '') {
      if (data.length) yield { event, data: JSON.parse(data.join('\n')) };
      event = 'message';
      data = [];
    } else if (line.startsWith('event:')) {
      event = line.slice(6).trim();
    } else if (line.startsWith('data:')) {
      data.push(line.slice(5).trimStart());
    }
  }
}
