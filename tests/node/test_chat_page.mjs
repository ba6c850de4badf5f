// test_chat_page.mjs - the chat page kvant serve answers GET / with, driven in a
// real headless Chromium (Debian's `chromium`) through puppeteer-core.
// usage: node test_chat_page.mjs KVANT_BINARY [SCREENSHOT.png]
//   KVANT_SCREENSHOT=FILE   where the mid-reply screenshot goes (default: the
//                           second argument, else ./chat_page.png)
//   KVANT_CHROMIUM=FILE     the browser (default /usr/bin/chromium, else `chromium` on PATH)
// Without a browser: exit 77 (ctest SKIP) with how to install it, or, under
// CI=true, a failure: CI must really run this test.
//
// Starts `kvant serve --api-key KEY` with the built-in model and checks: the
// page's HTTP answers (GET, HEAD, ETag, 404/405 around it, which routes need
// the key); in the browser, the key dialog (a wrong key is refused), the model
// name, the engine panel's numbers; a long reply that streams (its text grows
// over many SSE chunks), a screenshot mid-reply, Stop mid-reply, after which
// the server has cancelled the request and holds no KV block; a second reply
// to its end with HTML in the message shown as text; no request leaves the
// server's origin; and what the page costs the server (requests/s to
// /metrics idle and while streaming).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import assert from 'node:assert/strict';
import { startServe, stopServe } from './serve.mjs';

const SKIP = 77;
const CI = /^(1|true|yes)$/i.test(process.env.CI || '');
const [kvant, shotArg] = process.argv.slice(2);
if (!kvant) {
  console.error('usage: node test_chat_page.mjs KVANT_BINARY [SCREENSHOT.png]');
  process.exit(2);
}
const SHOT = resolve(process.env.KVANT_SCREENSHOT || shotArg || 'chat_page.png');
const PAGE_SRC = new URL('../../server/ui/index.html', import.meta.url);

function findChromium() {
  if (process.env.KVANT_CHROMIUM) return existsSync(process.env.KVANT_CHROMIUM) ? process.env.KVANT_CHROMIUM : null;
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium';
  try {
    return execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}
const chromium = findChromium();
if (!chromium) {
  const how = 'install Debian\'s chromium: `sudo apt-get install chromium` (scripts/setup --tests does), ' +
              'or point KVANT_CHROMIUM at a Chromium/Chrome binary';
  if (CI) {
    console.error(`FAIL test_chat_page: no Chromium found (CI=true: this test must run): ${how}`);
    process.exit(1);
  }
  console.log(`SKIP test_chat_page: no Chromium found; ${how}`);
  process.exit(SKIP);
}
let puppeteer;
try {
  ({ default: puppeteer } = await import('puppeteer-core'));
} catch {
  console.error('FAIL test_chat_page: the puppeteer-core package is missing: run `npm ci` in tests/node');
  process.exit(1);
}

const T0 = Date.now();
const say = (s) => console.log(`[${((Date.now() - T0) / 1000).toFixed(2).padStart(6)} s] ${s}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The built-in model is tiny and fast (4000 tokens in about 1 s here on an
// idle machine), so the replies Stop must interrupt are made long: a 16384-token
// context and max_tokens 16000, where attention over the growing context makes
// a late token many times dearer than an early one: over 10 s at -t 2, against
// about 1.2 s from the first token to the click.  A reply that still ends first
// is retried (3 attempts).  --max-seqs 2 keeps the KV pool small (2048
// blocks), so the panel's bar visibly moves.
const KEY = 'page-test-key';
const srv = startServe(kvant, ['--port', '0', '-t', '2', '-c', '16384', '--max-seqs', '2', '--api-key', KEY, '-q']);
const port = await srv.ready;
const ORIGIN = `http://127.0.0.1:${port}`;
say(`kvant serve on ${ORIGIN}; browser ${chromium}`);

async function metrics() {
  const r = await fetch(ORIGIN + '/metrics');
  assert.equal(r.status, 200);
  const m = new Map();
  for (const line of (await r.text()).split('\n')) {
    if (!line || line[0] === '#') continue;
    const sp = line.lastIndexOf(' ');
    m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return m;
}
const CANCELLED = 'kvant_requests_total{outcome="cancelled"}';

let browser = null, failed = 0, passed = 0;
function ok(name) { passed++; say(`ok   ${name}`); }

try {
  // ---- the page over plain HTTP ------------------------------------------------
  const src = readFileSync(PAGE_SRC, 'utf8');
  {
    const r = await fetch(ORIGIN + '/');
    assert.equal(r.status, 200, 'GET / without the key must load (the page asks for the key)');
    assert.equal(r.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(r.headers.get('cache-control'), 'no-cache');
    assert.match(r.headers.get('content-security-policy'), /connect-src 'self'/);
    const etag = r.headers.get('etag');
    assert.ok(etag, 'ETag');
    const body = await r.text();
    assert.equal(body, src, 'GET / serves server/ui/index.html as it is now (is the build current?)');
    const h = await fetch(ORIGIN + '/', { method: 'HEAD' });
    assert.equal(h.status, 200);
    assert.equal(h.headers.get('content-length'), String(Buffer.byteLength(src)));
    assert.equal((await h.text()).length, 0);
    const c = await fetch(ORIGIN + '/', { headers: { 'If-None-Match': etag } });
    assert.equal(c.status, 304);
    assert.equal((await fetch(ORIGIN + '/no-such-page')).status, 404);
    assert.equal((await fetch(ORIGIN + '/', { method: 'POST', body: 'x' })).status, 405);
    assert.equal((await fetch(ORIGIN + '/metrics')).status, 200, '/metrics stays open (counts only)');
    assert.equal((await fetch(ORIGIN + '/v1/models')).status, 401, '/v1/* needs the key');
    // the page inserts text only, and names no other origin
    assert.ok(!/innerHTML|outerHTML|insertAdjacentHTML|document\.write/.test(src), 'no HTML insertion in the page');
    assert.ok(!/\b(src|href)\s*=\s*["']?(https?:)?\/\//i.test(src), 'no external src/href');
    ok(`GET / (${Buffer.byteLength(src)} bytes, text/html, no-cache + ETag -> 304), HEAD /, 404 and 405 around it; ` +
       '/ and /metrics open, /v1/* keyed');
  }

  // ---- the browser ----------------------------------------------------------------
  browser = await puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 820 });
  const reqs = [], foreign = [], pageErrors = [];
  page.on('request', (q) => {
    const u = new URL(q.url());
    if (u.protocol === 'data:') return;
    if (u.origin !== ORIGIN) foreign.push(q.url());
    reqs.push({ t: Date.now(), path: u.pathname, method: q.method() });
  });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource.*401/.test(m.text())) pageErrors.push(m.text());
  });
  const count = (path, t0, t1) => reqs.filter((q) => q.path === path && q.t >= t0 && q.t < t1).length;
  // the page's /metrics polls in [t0, t1): how many, and the rate from the
  // mean gap between consecutive ones (a count over a window is off by one
  // poll depending on where the window's edges fall)
  // The page's timer polls every 1 s; an early poll (first token, end of a
  // reply) moves the next one back, so one gap in a window can be short.
  // The rate is 1 / the median gap (one early poll does not move it; the
  // mean gap over 5 s did, by up to 25%, and failed under TSan at 1.21), and
  // `extra` counts polls beyond one per second plus that early one.
  const pollRate = (t0, t1) => {
    const t = reqs.filter((q) => q.path === '/metrics' && q.t >= t0 && q.t < t1).map((q) => q.t);
    const gaps = t.slice(1).map((x, i) => (x - t[i]) / 1000).sort((a, b) => a - b);
    const gap = gaps.length ? gaps[(gaps.length - 1) >> 1] : NaN;
    const extra = Math.max(0, t.length - (Math.floor((t1 - t0) / 1000) + 2));
    return { n: t.length, gap, rate: 1 / gap, extra };
  };
  const text = (sel) => page.$eval(sel, (e) => e.textContent);
  const setField = (id, v) => page.$eval('#' + id, (e, x) => { e.value = x; }, String(v));

  await page.goto(ORIGIN + '/', { waitUntil: 'load' });
  await page.waitForSelector('#keydlg:not([hidden])', { timeout: 10000 });
  await page.type('#key', 'not-the-key');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => /refused/.test(document.getElementById('keyerr').textContent), { timeout: 10000 });
  assert.equal(await page.$eval('#keydlg', (e) => e.hidden), false);
  await page.$eval('#key', (e) => { e.value = ''; });
  await page.type('#key', KEY);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#keydlg[hidden]', { timeout: 10000 });
  await page.waitForFunction(() => document.getElementById('model').textContent === 'stories260K', { timeout: 10000 });
  ok(`key dialog: a wrong key is refused, the right one opens the page; model '${await text('#model')}', ` +
     `${await text('#ctx')}`);

  await page.waitForFunction(() => /^\d+$/.test(document.getElementById('m-kv-free').textContent), { timeout: 10000 });
  const panel0 = {
    running: await text('#m-running'), waiting: await text('#m-waiting'), free: await text('#m-kv-free'),
    used: await text('#m-kv-used'),
  };
  assert.equal(panel0.running, '0');
  assert.equal(panel0.waiting, '0');
  assert.equal(panel0.used, '0');
  assert.ok(Number(panel0.free) > 0);
  ok(`engine panel idle: running ${panel0.running}, waiting ${panel0.waiting}, KV used ${panel0.used} / free ${panel0.free}`);

  await page.screenshot(); // the first screenshot is slow (compositor start-up): not mid-reply

  // ---- what the page costs the server while idle ------------------------------------
  const IDLE_MS = 5000;
  const ti0 = Date.now();
  await sleep(IDLE_MS);
  const ti1 = Date.now();
  const idle = pollRate(ti0, ti1), idleAll = reqs.filter((q) => q.t >= ti0 && q.t < ti1).length;
  assert.ok(idle.rate >= 0.8 && idle.rate <= 1.2 && idle.extra === 0, `idle poll rate ${idle.rate}, ${idle.n} polls`);
  assert.equal(idleAll, idle.n, 'nothing but /metrics while idle');
  ok(`page polls: ${idle.rate.toFixed(2)} req/s to /metrics while idle (interval 1 s; ${idle.n} polls in ` +
     `${((ti1 - ti0) / 1000).toFixed(1)} s, ${idle.gap.toFixed(3)} s apart (median); no other request)`);

  // ---- a long reply: it streams, a screenshot mid-reply, Stop ---------------------------
  await setField('temperature', '0.3');
  await setField('max_tokens', '16000');
  await page.evaluate(() => { // the reply's text length at each change of the page
    window.__growth = [];
    const log = document.getElementById('log');
    new MutationObserver(() => {
      const all = log.querySelectorAll('.msg.assistant'), m = all[all.length - 1];
      if (!m) return;
      const n = m.querySelector('.body').textContent.length, g = window.__growth;
      if (n && n !== g[g.length - 1]) g.push(n);
    }).observe(log, { subtree: true, childList: true, characterData: true });
  });
  const lastState = () => page.evaluate(() => {
    const all = document.querySelectorAll('#log .msg.assistant'), m = all[all.length - 1];
    return m ? { state: m.dataset.state, finish: m.dataset.finish || '', len: m.querySelector('.body').textContent.length,
                 meta: m.querySelector('.meta').textContent, growth: window.__growth.length,
                 chunks: Number(m.dataset.chunks || 0) } : null;
  });
  let stopped = null, ts0 = 0, ts1 = 0;
  for (let attempt = 1; attempt <= 3 && !stopped; attempt++) {
    const before = await metrics();
    await page.evaluate(() => { window.__growth = []; });
    await page.click('#clear');
    await page.type('#input', 'Once upon a time there was a little cat. Tell me the whole story.');
    const polls0 = Number(await page.$eval('#engine', (e) => e.dataset.polls));
    ts0 = Date.now();
    await page.keyboard.press('Enter');
    // several chunks in, and two polls of the panel since (the one at the first
    // token and the next, whose counter deltas fall within the reply; on a
    // retry, one: a machine fast enough to end the reply first)
    const need = attempt === 1 ? 2 : 1;
    await page.waitForFunction((p0) => {
      const all = document.querySelectorAll('#log .msg.assistant'), m = all[all.length - 1];
      return (m && m.dataset.state !== 'streaming') ||
             (window.__growth.length >= 5 && Number(document.getElementById('m-running').textContent) >= 1 &&
              Number(document.getElementById('engine').dataset.polls) >= p0 + 2);
    }, { timeout: 30000, polling: 20 }, polls0 + need - 2); // not 'mutation': it misses text appended to a Text node
    const tFirst = Date.now();
    let tShot = 0;
    let s = await lastState();
    if (s.state === 'streaming') {
      await page.screenshot({ path: SHOT, optimizeForSpeed: true });
      tShot = Date.now() - tFirst;
      s = await lastState();
    }
    if (s.state !== 'streaming') {
      say(`attempt ${attempt}: the reply ended (${s.finish}, ${s.len} chars) before Stop; again`);
      continue;
    }
    const grownBeforeStop = s.growth, lenAtStop = s.len, chunksAtStop = s.chunks;
    await page.click('#stop');
    ts1 = Date.now();
    await page.waitForFunction(() => {
      const all = document.querySelectorAll('#log .msg.assistant');
      return all[all.length - 1].dataset.state !== 'streaming';
    }, { timeout: 10000 });
    s = await lastState();
    if (s.state !== 'stopped') { say(`attempt ${attempt}: ended as ${s.state}/${s.finish} while stopping; again`); continue; }
    stopped = { before, s, grownBeforeStop, lenAtStop, chunksAtStop, attempt, after: ts1 - tFirst, tShot };
  }
  assert.ok(stopped, 'Stop never landed mid-reply in 3 attempts (the server finished every reply first)');
  assert.ok(stopped.grownBeforeStop >= 5, `the reply grew ${stopped.grownBeforeStop} times before Stop`);
  assert.ok(stopped.chunksAtStop >= stopped.grownBeforeStop, 'SSE chunks >= text updates');
  ok(`reply streamed: its text grew ${stopped.grownBeforeStop} times (one update per animation frame; ` +
     `${stopped.chunksAtStop} SSE chunks) to ${stopped.lenAtStop} chars ` +
     `before Stop, clicked ${stopped.after} ms after ` +
     `that (the screenshot took ${stopped.tShot} ms; attempt ${stopped.attempt}); screenshot mid-reply: ${SHOT}`);
  {
    let m;
    for (;;) {
      m = await metrics();
      if (m.get('kvant_kv_blocks_used') === 0 && m.get('kvant_num_requests_running') === 0) break;
      if (Date.now() - ts1 > 10000) break;
      await sleep(20);
    }
    stopped.freedAt = Date.now();
    assert.equal(m.get('kvant_kv_blocks_used'), 0, 'KV blocks still used after Stop');
    assert.equal(m.get('kvant_num_requests_running'), 0);
    assert.equal(m.get(CANCELLED), stopped.before.get(CANCELLED) + 1, 'the server counted the request as cancelled');
    ok(`server after Stop: request cancelled (${CANCELLED} ${stopped.before.get(CANCELLED)} -> ${m.get(CANCELLED)}), ` +
       `KV blocks used 0 (cached ${m.get('kvant_kv_blocks_cached')}, free ${m.get('kvant_kv_blocks_free')}) ` +
       `${stopped.freedAt - ts1} ms after the click`);
  }
  {
    const len = stopped.s.len;
    await sleep(500);
    const after = await lastState();
    assert.equal(after.len, len, 'no text after Stop');
    assert.equal(await page.$eval('#send', (e) => e.disabled), false);
    assert.equal(await page.$eval('#stop', (e) => e.disabled), true);
    assert.match(after.meta, /stopped/);
    ok(`Stop: the page says '${after.meta}'; no text after it; Send is enabled again`);
  }
  {
    await page.waitForFunction(() => document.getElementById('m-kv-used').textContent === '0' &&
                               document.getElementById('m-running').textContent === '0', { timeout: 5000 });
    const p = { cached: await text('#m-kv-cached'), free: await text('#m-kv-free'), reqs: await text('#m-reqs'),
                ttft: await text('#m-ttft'), tps: await text('#m-tps') };
    assert.match(p.ttft, /^[\d.]+ (ms|s)$/);
    assert.match(p.tps, /^[\d.]+$/);
    assert.match(p.reqs, /^\d+ \/ [1-9]\d*$/);
    ok(`engine panel after Stop: KV used 0 / cached ${p.cached} / free ${p.free}; requests ok/cancelled ${p.reqs}; ` +
       `TTFT ${p.ttft}; ${p.tps} tokens/s`);
  }

  // ---- what the page costs the server while streaming: 5 s of a long reply ----------------
  {
    await page.click('#clear');
    await setField('max_tokens', '16000');
    await page.type('#input', 'Once upon a time there was a big dog. Tell me the whole story.');
    const tw0 = Date.now();
    await page.keyboard.press('Enter');
    let tpsSeen = 0, s;
    for (;;) { // until 4 s have passed or the reply ended
      s = await lastState();
      tpsSeen = Math.max(tpsSeen, Number(await text('#m-tps')) || 0);
      if (s.state !== 'streaming' || Date.now() - tw0 >= 5000) break;
      await sleep(100);
    }
    const tw1 = Date.now();
    if (s.state === 'streaming') await page.click('#stop');
    const dur = (tw1 - tw0) / 1000, st = pollRate(tw0, tw1);
    const other = reqs.filter((q) => q.t >= tw0 && q.t < tw1 && q.path !== '/metrics').map((q) => q.path);
    assert.ok(tpsSeen > 0, 'the panel showed tokens/s while streaming');
    assert.deepEqual(other, ['/v1/chat/completions'], 'nothing but the stream and /metrics while the reply streams');
    assert.ok(st.rate >= 0.8 && st.rate <= 1.2 && st.extra === 0, `streaming poll rate ${st.rate}, ${st.n} polls`);
    await page.waitForFunction(() => document.querySelector('#log .msg.assistant').dataset.state !== 'streaming',
                               { timeout: 10000 });
    ok(`page polls while streaming: ${st.rate.toFixed(2)} req/s to /metrics (${st.n} polls in ${dur.toFixed(1)} s ` +
       `from Send, the one at the first token included, ${st.gap.toFixed(3)} s apart (median)) + the one ` +
       `streaming /v1/chat/completions, ${((st.n + 1) / dur).toFixed(2)} req/s in all; ` +
       `the panel showed up to ${tpsSeen} generated tokens/s`);
  }

  // ---- a reply to its end; HTML in the message stays text --------------------------------
  {
    await page.click('#clear');
    await setField('max_tokens', '48');
    const msg = 'A dog <b>named</b> <img src=x onerror="window.__xss=1"> Rex & "friends"';
    await page.type('#input', msg);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#log .msg.assistant').dataset.state !== 'streaming',
                               { timeout: 60000 });
    const done = await lastState();
    assert.equal(done.state, 'done', done.meta);
    assert.equal(done.finish, 'length');
    assert.match(done.meta, /^48 tokens · TTFT [\d.]+ (ms|s) · [\d.]+ tokens\/s · finish: length$/);
    const shown = await page.evaluate(() => ({
      user: document.querySelector('#log .msg.user .body').textContent,
      elements: document.querySelectorAll('#log .body *').length,
      xss: window.__xss,
    }));
    assert.equal(shown.user, msg);
    assert.equal(shown.elements, 0, 'message bodies hold text only');
    assert.equal(shown.xss, undefined);
    ok(`reply to its end: '${done.meta}'; HTML in the message shown as text`);
  }
  {
    const t = Date.now();
    let m;
    do { m = await metrics(); if (m.get('kvant_kv_blocks_used')) await sleep(20); }
    while (m.get('kvant_kv_blocks_used') && Date.now() - t < 10000);
    assert.equal(m.get('kvant_kv_blocks_used'), 0);
    ok(`server at the end: KV blocks used 0, requests ok ${m.get('kvant_requests_total{outcome="ok"}')}, ` +
       `cancelled ${m.get(CANCELLED)}`);
  }

  assert.deepEqual(foreign, [], 'requests outside the server');
  assert.deepEqual(pageErrors, [], 'errors in the page');
  const byPath = {};
  for (const q of reqs) byPath[`${q.method} ${q.path}`] = (byPath[`${q.method} ${q.path}`] || 0) + 1;
  ok(`no request left ${ORIGIN}, no error in the page; all the page's requests: ${JSON.stringify(byPath)}`);
} catch (e) {
  failed++;
  say(`FAIL ${e.stack || e}`);
} finally {
  if (browser) await browser.close().catch(() => {});
}
const bad = await stopServe(srv);
if (bad) {
  failed++;
  say(`FAIL ${bad}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
