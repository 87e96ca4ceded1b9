// What a JavaScript app does with ollama-js (the `ollama` npm package), unchanged, against the server at argv[2]:
// each step's outcome is printed as one JSON line {"step", "ok", "value"} (or "error", "status"), for
// tests/integration/test_ollama_js.py to judge. The model is argv[3]; NODE_PATH holds the package.
const { Ollama } = require('ollama');

const host = process.argv[2];
const model = process.argv[3];
const client = new Ollama({ host });

async function step(name, fn) {
  try {
    const value = await fn();
    console.log(JSON.stringify({ step: name, ok: true, value }));
  } catch (e) {
    console.log(JSON.stringify({ step: name, ok: false, error: String(e.error || e.message), status: e.status_code }));
  }
}

async function collect(iterator, limit) {
  const parts = [];
  for await (const part of iterator) {
    parts.push(part);
    if (limit && parts.length >= limit) {
      iterator.abort();
      break;
    }
  }
  return parts;
}

(async () => {
  await step('version', async () => (await client.version()).version);
  await step('list', async () => (await client.list()).models.map((m) => m.name));
  await step('show', async () => {
    const shown = await client.show({ model });
    return { capabilities: shown.capabilities, family: shown.details.family, has_template: 'template' in shown };
  });
  await step('generate', async () => {
    const r = await client.generate({ model, prompt: 'Hello', options: { num_predict: 3 } });
    return { response: r.response, done: r.done, done_reason: r.done_reason, eval_count: r.eval_count };
  });
  await step('generate_stream', async () => {
    const parts = await collect(await client.generate({ model, prompt: 'Hello', stream: true }));
    return { texts: parts.filter((p) => !p.done).map((p) => p.response), last_done: parts[parts.length - 1].done };
  });
  await step('chat', async () => {
    const r = await client.chat({ model, messages: [{ role: 'user', content: 'Hello' }] });
    return { role: r.message.role, content: r.message.content, tool_calls: r.message.tool_calls || null };
  });
  await step('chat_stream', async () => {
    const parts = await collect(await client.chat({ model, messages: [{ role: 'user', content: 'Hello' }],
                                                    stream: true }));
    return { texts: parts.filter((p) => !p.done).map((p) => p.message.content), last_done: parts[parts.length - 1].done };
  });
  await step('chat_tools', async () => {
    const r = await client.chat({
      model,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
                                               parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    return { content: r.message.content, tool_calls: (r.message.tool_calls || []).map((c) => c.function) };
  });
  await step('abort', async () => {
    const parts = await collect(await client.generate({ model, prompt: 'Hello', stream: true }), 2);
    const after = await client.generate({ model, prompt: 'Hello', options: { num_predict: 2 } });
    return { parts: parts.length, after: after.response };
  });
  await step('embed', async () => {
    const r = await client.embed({ model, input: ['hello', 'world'] });
    return { count: r.embeddings.length, dims: r.embeddings.map((e) => e.length) };
  });
  await step('create', async () => {
    const parts = await collect(await client.create({ model: 'js-copy', from: model, system: 'Be brief.',
                                                      stream: true }));
    return parts.map((p) => p.status);
  });
  await step('copy', async () => (await client.copy({ source: 'js-copy', destination: 'js-copy-2' })).status);
  await step('ps', async () => (await client.ps()).models.map((m) => m.name));
  await step('delete', async () => {
    await client.delete({ model: 'js-copy' });
    await client.delete({ model: 'js-copy-2' });
    return (await client.list()).models.map((m) => m.name);
  });
  await step('missing_model', async () => client.chat({ model: 'nope', messages: [{ role: 'user', content: 'Hi' }] }));
})();
