// test_openai.mjs - kvant serve driven by the unmodified `openai` npm package.
// usage: node test_openai.mjs KVANT_BINARY MODEL.gguf
// Starts `kvant serve --port 0 --api-key ...`, reads the port from its log,
// then checks models, completions and chat (plain and streaming), n > 1 and
// the client's typed errors (404 model, 401 key, 400 bad value).
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch (e) {
  console.error('test_openai: the openai package is missing: run `npm ci` in tests/node');
  process.exit(1);
}

const [kvant, model] = process.argv.slice(2);
if (!kvant || !model) {
  console.error('usage: node test_openai.mjs KVANT_BINARY MODEL.gguf');
  process.exit(2);
}
const KEY = 'node-test-key';
const srv = spawn(kvant, ['serve', '-m', model, '--port', '0', '-t', '1', '--api-key', KEY, '-q'],
                  { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('server did not start:\n' + log)), 60000);
  srv.stderr.on('data', (d) => {
    log += d;
    const m = log.match(/http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) { clearTimeout(timer); resolve(Number(m[1])); }
  });
  srv.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
});
const exited = new Promise((resolve) => srv.on('exit', (code, sig) => resolve({ code, sig })));

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0 });
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

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

srv.kill('SIGTERM');
const { code, sig } = await exited;
if (code !== 0) {
  failed++;
  console.log(`FAIL server exit: code ${code} signal ${sig}\n${log}`);
}
console.log(failed ? `${failed} FAILED` : 'all passed');
process.exit(failed ? 1 : 0);
