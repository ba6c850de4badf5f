// test_openai.mjs - kvant serve driven by the unmodified `openai` npm package.
// usage: node test_openai.mjs KVANT_BINARY MODEL.gguf TMP_DIR
// (TMP_DIR: where test_server_tools wrote tool_call_stream.sse and tools_e2e.json)
// Starts `kvant serve --port 0 --api-key ...`, reads the port from its log,
// then checks models, completions and chat (plain and streaming), n > 1,
// the request fields (logit_bias, stop arrays, penalties, echo, best_of),
// embeddings (base64, which the client asks for by default, decoded), tools
// (calls and results accepted; a real tool call from a model made to answer
// one, through create, the stream helper and the tool runner; tool_choice
// "required" / a named function forced by the grammar, streamed too) and
// the client's typed errors (404 model, 401 key, 400 bad value, 400 naming
// a field kvant does not support or does not know, a schema it cannot compile).
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import assert from 'node:assert/strict';
import { startServe, stopServe, tally } from './serve.mjs';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch (e) {
  console.error('test_openai: the openai package is missing: run `npm ci` in tests/node');
  process.exit(1);
}

const [kvant, model, tmp] = process.argv.slice(2);
if (!kvant || !model || !tmp) {
  console.error('usage: node test_openai.mjs KVANT_BINARY MODEL.gguf TMP_DIR');
  process.exit(2);
}
const KEY = 'node-test-key';
const main = startServe(kvant, ['-m', model, '--port', '0', '-t', '1', '--api-key', KEY, '-q']);
const port = await main.ready;

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0 });
const t = tally(), { check } = t;

const id = model.split('/').pop().replace(/\.[^.]*$/, '');
await check('models.list', async () => {
  const list = await client.models.list();
  assert.ok(list.data.some((m) => m.id === id));
});

let greedy = '';
await check('completions.create', async () => {
  const r = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
  greedy = r.choices[0].text;
  assert.ok(greedy.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 20);
});

await check('completions.create stream', async () => {
  const stream = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 20,
                                                   temperature: 0, stream: true });
  let text = '', finish = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    for (const ch of c.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks > 1);
  assert.equal(text, greedy);
  assert.equal(finish, 'length');
});

await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model: id, messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'A cat' }],
    max_tokens: 16, temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.prompt_tokens > 0);
});

await check('chat.completions.create stream + usage', async () => {
  const stream = await client.chat.completions.create({
    model: id, messages: [{ role: 'user', content: 'A cat' }], max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.ok(['length', 'stop'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
  assert.ok(text.length > 0 || finish === 'stop');
});

await check('n = 3', async () => {
  const r = await client.completions.create({ model: id, prompt: 'The dog', max_tokens: 8, n: 3, seed: 5 });
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1, 2]);
});

await check('stream aborted by the client', async () => {
  const stream = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 1000,
                                                   stream: true, ignore_eos: true });
  let n = 0;
  for await (const c of stream) if (++n === 3) break; // closes the connection
  assert.equal(n, 3);
});

await check('unknown model -> NotFoundError 404', async () => {
  await assert.rejects(client.completions.create({ model: 'gpt-4', prompt: 'hi', max_tokens: 2 }),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

await check('wrong key -> AuthenticationError 401', async () => {
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

await check('bad temperature -> BadRequestError 400 naming the param', async () => {
  await assert.rejects(client.completions.create({ model: id, prompt: 'hi', temperature: 7 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
});

// the token ids of a text as /v1/completions tokenizes it (BOS first)
async function tokenize(content) {
  const r = await fetch(`http://127.0.0.1:${port}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ content, add_special: true, parse_special: false }) });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
}

await check('logit_bias: +100 forces a token, -100 bans greedy\'s pick', async () => {
  const ids = await tokenize('Once upon');
  const upon = ids[ids.length - 1];
  const forced = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 4,
                                                   temperature: 0.7, seed: 1, logit_bias: { [upon]: 100 } });
  assert.equal(forced.choices[0].text, ' upon'.repeat(4));
  const all = await tokenize('Once upon a time' + greedy);
  const first = all[(await tokenize('Once upon a time')).length];
  const banned = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 20,
                                                   temperature: 0, logit_bias: { [first]: -100 } });
  assert.notEqual(banned.choices[0].text, greedy);
});

await check('stop array', async () => {
  const cut = greedy.indexOf(' there');
  assert.ok(cut >= 0, greedy);
  const r = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 20, temperature: 0,
                                             stop: ['qqqq', ' there'] });
  assert.equal(r.choices[0].text, greedy.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await check('presence / frequency penalties accepted and honoured', async () => {
  const base = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 48,
                                                 temperature: 0 });
  const pen = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 48,
                                                temperature: 0, presence_penalty: 2, frequency_penalty: 1 });
  assert.notEqual(pen.choices[0].text, base.choices[0].text);
  const chat = await client.chat.completions.create({ model: id, messages: [{ role: 'user', content: 'A cat' }],
                                                      max_completion_tokens: 8, presence_penalty: 0.5,
                                                      user: 'u-1', metadata: { run: 'node' } });
  assert.equal(chat.choices[0].message.role, 'assistant');
});

await check('echo and best_of', async () => {
  const e = await client.completions.create({ model: id, prompt: 'Once upon a time', max_tokens: 20, temperature: 0,
                                             echo: true });
  assert.equal(e.choices[0].text, 'Once upon a time' + greedy);
  const b = await client.completions.create({ model: id, prompt: 'The dog', max_tokens: 8, n: 1, best_of: 3,
                                             seed: 3 });
  assert.equal(b.choices.length, 1);
  assert.equal(b.usage.completion_tokens > 8, true);
});

await check('response_format with a schema kvant cannot compile -> BadRequestError 400 naming response_format', async () => {
  // (test_structured.mjs holds replies to ~20 schemas; this is the refusal's shape)
  await assert.rejects(client.chat.completions.create({ model: id, messages: [{ role: 'user', content: 'x' }],
                                                        response_format: { type: 'json_schema', json_schema: {
                                                          name: 'm', schema: { type: 'object',
                                                                               patternProperties: { '^x': {} } } } } }),
                       (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
                              e.param === 'response_format' && e.code === 'unsupported_schema' &&
                              /'patternProperties'/.test(e.message));
});

await check('unknown field -> BadRequestError 400 naming it', async () => {
  await assert.rejects(client.completions.create({ model: id, prompt: 'hi', max_tokens: 2, mirostat: 2 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'mirostat' &&
                              e.code === 'unknown_field');
});

await check('embeddings.create (the client asks for base64 and decodes it)', async () => {
  const inputs = ['Once upon a time', 'The dog ran to the park.', 'A cat.'];
  const r = await client.embeddings.create({ model: id, input: inputs });
  assert.equal(r.object, 'list');
  assert.equal(r.model, id);
  assert.equal(r.data.length, 3);
  const f = await client.embeddings.create({ model: id, input: inputs, encoding_format: 'float' });
  for (let i = 0; i < 3; i++) {
    const v = r.data[i].embedding;
    assert.equal(r.data[i].index, i);
    assert.ok(Array.isArray(v));
    assert.equal(v.length, 64); /* stories260K's dim */
    const norm = v.reduce((a, x) => a + x * x, 0);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
    /* the decoded base64 is the float response's float32s exactly */
    assert.deepEqual(v, f.data[i].embedding.map(Math.fround));
  }
  assert.ok(r.usage.prompt_tokens > 3);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
  const one = await client.embeddings.create({ model: id, input: 'A cat.', dimensions: 64, user: 'u-1' });
  assert.deepEqual(one.data[0].embedding, r.data[2].embedding);
});

await check('embeddings: dimensions other than the model\'s -> BadRequestError naming dimensions', async () => {
  await assert.rejects(client.embeddings.create({ model: id, input: 'x', dimensions: 8 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
  await assert.rejects(client.embeddings.create({ model: id, input: '' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
});

// ---- tools ----------------------------------------------------------------------
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
// a question, the model's call (content null, arguments a JSON text) and its result, as the client sends them
const HISTORY = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc123', type: 'function',
    function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_abc123', content: '22 degrees, clear' }];

await check('chat with tools, a call and its result (stories260K writes no call: a message)', async () => {
  const r = await client.chat.completions.create({ model: id, messages: HISTORY, tools: TOOLS, max_tokens: 8,
                                                   temperature: 0, parallel_tool_calls: true });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, 'length');
  const plain = await client.chat.completions.create({ model: id, messages: [HISTORY[0]], max_tokens: 1 });
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50); // the tools, the call and the result are in it
});

await check('chat with tools streamed', async () => {
  const stream = await client.chat.completions.create({ model: id, messages: HISTORY, tools: TOOLS, max_tokens: 8,
                                                        tool_choice: 'auto', stream: true });
  let finish = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    for (const ch of c.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(chunks > 1);
  assert.ok(['length', 'stop'].includes(finish));
});

// tool_choice "required" / a named function: the grammar holds the reply to
// one call of a listed tool whose arguments match its parameters schema
// (stories260K writes no call by itself; the server's template here is the
// generic one, <tool_call> blocks).  Checked by hand against the schemas.
const FORCED_TOOLS = [
  { type: 'function', function: { name: 'get_weather', strict: true, parameters: {
    type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', parameters: {
    type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } } },
];
function assertForcedCall(call, want) {
  assert.equal(call.type, 'function');
  if (want) assert.equal(call.function.name, want);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city']);
    assert.ok(['Paris', 'Rome'].includes(args.city), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'add');
    assert.deepEqual(Object.keys(args), ['a', 'b']);
    assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), call.function.arguments);
  }
}
const FORCED_MSG = [{ role: 'user', content: 'What is the weather in Paris?' }];

await check('tool_choice required / a named function: a forced call through create (n 8, temperature 1)', async () => {
  for (const [tool_choice, want] of [['required', null], [{ type: 'function', function: { name: 'add' } }, 'add']]) {
    const r = await client.chat.completions.create({ model: id, messages: FORCED_MSG, tools: FORCED_TOOLS, tool_choice,
                                                     n: 8, temperature: 1, max_tokens: 200 });
    assert.equal(r.choices.length, 8);
    for (const ch of r.choices) {
      assert.equal(ch.finish_reason, 'tool_calls');
      assert.equal(ch.message.content, null);
      assert.equal(ch.message.tool_calls.length, 1);
      assertForcedCall(ch.message.tool_calls[0], want);
    }
  }
});

await check('tool_choice required streamed: the client\'s stream helper and plain chunks', async () => {
  const stream = client.beta.chat.completions.stream({ model: id, messages: FORCED_MSG, tools: FORCED_TOOLS,
                                                       tool_choice: 'required', temperature: 1, seed: 3,
                                                       max_tokens: 200, stream: true });
  const transcript = [];
  let done = null;
  stream.on('chunk', (c) => transcript.push(JSON.stringify({ delta: c.choices[0]?.delta,
                                                               finish_reason: c.choices[0]?.finish_reason })));
  stream.on('tool_calls.function.arguments.done', (e) => { done = e; });
  const final = await stream.finalChatCompletion();
  console.log('     streamed tool_choice required, the chunks\' deltas:\n       ' + transcript.join('\n       '));
  const ch = final.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.equal(ch.message.tool_calls.length, 1);
  assertForcedCall(ch.message.tool_calls[0], null);
  assert.equal(done.name, ch.message.tool_calls[0].function.name);
  assert.deepEqual(done.parsed_arguments ?? JSON.parse(done.arguments), JSON.parse(ch.message.tool_calls[0].function.arguments));
  // chunk by chunk, a named function
  const chunks = await client.chat.completions.create({ model: id, messages: FORCED_MSG, tools: FORCED_TOOLS,
                                                        tool_choice: { type: 'function', function: { name: 'get_weather' } },
                                                        temperature: 1, max_tokens: 200, stream: true });
  let name = '', args = '', finish = null;
  for await (const c of chunks) {
    for (const ch2 of c.choices) {
      for (const tc of ch2.delta.tool_calls ?? []) {
        assert.equal(tc.index, 0);
        name += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      if (ch2.finish_reason) finish = ch2.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assertForcedCall({ type: 'function', function: { name, arguments: args } }, 'get_weather');
});

await check('tool choices refused by field: an unknown function name, strict with auto, a bad tool name', async () => {
  await assert.rejects(client.chat.completions.create({ model: id, messages: [HISTORY[0]], tools: TOOLS,
                                                        tool_choice: { type: 'function', function: { name: 'get_date' } } }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice' &&
                              /no tool is named 'get_date'/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: id, messages: [HISTORY[0]], tools: FORCED_TOOLS }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools' &&
                              /tools\[0\]\.function\.strict/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: id, messages: [HISTORY[0]],
                                                        tools: [{ type: 'function', function: { name: 'get weather' } }] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools' &&
                              /tools\[0\]\.function\.name/.test(e.message));
});

// The transcript test_server_tools.c made with the server's own render code
// (a reply "Let me check." + a <tool_call> block, streamed): served as is to
// the client's stream helper, which must assemble the content and the call.
await check('the client\'s stream helper assembles the server\'s tool-call deltas (test_server_tools transcript)', async () => {
  const sse = readFileSync(`${tmp}/tool_call_stream.sse`);
  const fake = createServer((req, res) => {
    req.resume();
    req.on('end', () => { res.writeHead(200, { 'Content-Type': 'text/event-stream' }); res.end(sse); });
  });
  await new Promise((r) => fake.listen(0, '127.0.0.1', r));
  try {
    const c = new OpenAI({ baseURL: `http://127.0.0.1:${fake.address().port}/v1`, apiKey: 'x', maxRetries: 0 });
    const done = [];
    const stream = c.beta.chat.completions.stream({ model: 'stories260K', messages: [HISTORY[0]], tools: TOOLS });
    stream.on('tool_calls.function.arguments.done', (e) => done.push(e));
    const final = await stream.finalChatCompletion();
    const m = final.choices[0].message;
    assert.equal(m.content, 'Let me check.');
    assert.equal(m.tool_calls.length, 1);
    assert.match(m.tool_calls[0].id, /^call_[A-Za-z0-9]{9}$/);
    assert.equal(m.tool_calls[0].type, 'function');
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
    assert.equal(final.choices[0].finish_reason, 'tool_calls');
    assert.equal(done.length, 1);
    assert.equal(done[0].name, 'get_weather');
  } finally {
    fake.close();
  }
});

// A real call from kvant serve: test_server_tools.c wrote a copy of
// stories260K whose vocabulary names the tokens it answers this request with
// ([TOOL_CALLS] as a control token, the call, EOS); tools_e2e.json is the request.
const e2e = JSON.parse(readFileSync(`${tmp}/tools_e2e.json`, 'utf8'));
const toolSrv = startServe(kvant, ['-m', e2e.model_path, '--chat-template', e2e.chat_template, '--port', '0', '-t', '1',
                                   '-q'], { what: 'tool server' });
const port2 = await toolSrv.ready;
const tc = new OpenAI({ baseURL: `http://127.0.0.1:${port2}/v1`, apiKey: 'none', maxRetries: 0 });
const e2eReq = { model: 'tools_e2e', messages: e2e.messages, tools: e2e.tools, logit_bias: e2e.logit_bias, temperature: 0 };

await check('a real tool call: chat.completions.create, then the result sent back', async () => {
  const r = await tc.chat.completions.create(e2eReq);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.match(m.tool_calls[0].id, /^[A-Za-z0-9]{9}$/); // Mistral's ids
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
  // the conversation goes on: the assistant's message as returned, the tool's answer
  const next = await tc.chat.completions.create({ ...e2eReq, max_tokens: 4, messages: [...e2e.messages, m,
    { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"temperature": 22}' }] });
  assert.equal(next.choices[0].message.role, 'assistant');
  assert.ok(next.usage.prompt_tokens > r.usage.prompt_tokens);
});

await check('a real tool call streamed: the client\'s stream helper and its events', async () => {
  const events = [];
  const stream = tc.beta.chat.completions.stream(e2eReq);
  stream.on('tool_calls.function.arguments.done', (e) => events.push(e));
  const final = await stream.finalChatCompletion();
  const m = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
  assert.equal(events.length, 1);
  assert.deepEqual(JSON.parse(events[0].arguments), { city: 'Paris' });
  // and chunk by chunk as a plain stream
  let calls = [], finish = null;
  for await (const c of await tc.chat.completions.create({ ...e2eReq, stream: true })) {
    for (const ch of c.choices) {
      assert.equal(ch.delta.content ?? null, null);
      for (const d of ch.delta.tool_calls ?? []) {
        calls[d.index] ??= { name: '', arguments: '' };
        if (d.function?.name) calls[d.index].name = d.function.name;
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.deepEqual(calls, [{ name: 'get_weather', arguments: '{"city":"Paris"}' }]);
  assert.equal(finish, 'tool_calls');
});

await check('a real tool call through the client\'s tool runner (runTools calls the function)', async () => {
  const seen = [];
  const runner = tc.beta.chat.completions.runTools({ ...e2eReq, max_tokens: 6, stream: true,
    tools: [{ type: 'function', function: { name: 'get_weather', description: e2e.tools[0].function.description,
      parameters: e2e.tools[0].function.parameters, parse: JSON.parse,
      function: (args) => { seen.push(args); return { temperature: 22 }; } } }] },
    { maxChatCompletions: 2 }); // this model calls again after every result: two rounds
  await runner.done();
  assert.equal(seen.length, 2);
  assert.deepEqual(seen[0], { city: 'Paris' });
  const toolMsg = runner.messages.find((x) => x.role === 'tool');
  assert.equal(toolMsg.content, '{"temperature":22}');
});

for (const s of [toolSrv, main]) {
  const bad = await stopServe(s);
  if (bad) t.fail(bad);
}
t.exit();
