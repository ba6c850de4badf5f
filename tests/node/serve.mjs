// serve.mjs - what the node tests share: `kvant serve` started on a free port
// (--port 0, the port read from its log) and stopped, and check(), which runs
// one named check and counts it.
import { spawn } from 'node:child_process';

// The port kvant serve names in its log once it listens, or null before.
export function listenPort(log) {
  const m = log.match(/http:\/\/127\.0\.0\.1:(\d+)/);
  return m ? Number(m[1]) : null;
}

// Starts `KVANT serve ARGS` (stdin and stdout ignored, stderr kept in s.log).
// s.ready resolves with ready(log) once that is not null (default: the port);
// a server that exits first, or is not ready in 60 s, rejects it with the log.
// s.exited resolves with the exit's { code, sig }.  what names the server in
// messages.
export function startServe(kvant, args, { what = 'server', ready = listenPort } = {}) {
  const srv = spawn(kvant, ['serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const s = { srv, what, log: '' };
  s.exited = new Promise((resolve) => srv.on('exit', (code, sig) => resolve({ code, sig })));
  s.ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start:\n${s.log}`)), 60000);
    srv.stderr.on('data', (d) => {
      s.log += d;
      const v = ready(s.log);
      if (v !== null) { clearTimeout(timer); resolve(v); }
    });
    srv.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${what} exited (${code}):\n${s.log}`)); });
  });
  return s;
}

// SIGTERM, then the exit: null for a clean one (code 0), else what to report.
export async function stopServe(s) {
  s.srv.kill('SIGTERM');
  const { code, sig } = await s.exited;
  return code === 0 ? null : `${s.what} exit: code ${code} signal ${sig}\n${s.log}`;
}

// A count of failures: t.check(name, fn) awaits fn and prints "ok   name" or
// "FAIL name: the error"; t.fail(msg) counts and prints a failure found
// otherwise; t.exit() prints the summary and exits 1 if anything failed.
export function tally() {
  const t = {
    failed: 0,
    async check(name, fn) {
      try {
        await fn();
        console.log(`ok   ${name}`);
      } catch (e) {
        t.fail(`${name}: ${e.stack || e}`);
      }
    },
    fail(msg) {
      t.failed++;
      console.log(`FAIL ${msg}`);
    },
    exit() {
      console.log(t.failed ? `${t.failed} FAILED` : 'all passed');
      process.exit(t.failed ? 1 : 0);
    },
  };
  return t;
}
