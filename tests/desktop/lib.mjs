// What the desktop tests share: the app under test (HEARTH_DESKTOP_BIN, HEARTH_TEST_MODEL and
// the scratch folder run.sh made), a WebKitWebDriver client for its real window, launching it
// with the test's env, and waiting for its window, its node and its end.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const ARTIFACTS = join(ROOT, 'test-artifacts');
export const APP = process.env.HEARTH_DESKTOP_BIN;
// The app's own processes: command lines that start with its path (a shell that only names it,
// as make's recipe for the tests beside it does, is not one).
const APP_COMMAND = `^${APP.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`;
export const MODEL = process.env.HEARTH_TEST_MODEL;
export const SCRATCH = process.env.HEARTH_DESKTOP_SCRATCH;
const ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(what, timeoutMs, fn, { fatal } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (fatal?.test(e.message)) throw new Error(`waiting for ${what}: ${e.message}`);
      last = e;
    }
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

export function portOpen(port) {
  return fetch(`http://127.0.0.1:${port}/api/status`).then(() => true, () => false);
}

export function sh(cmd, args) {
  return execFileSync(cmd, args, { encoding: 'utf8', timeout: 10_000 });
}

export class WebDriver {
  constructor(port) {
    this.base = `http://127.0.0.1:${port}`;
  }
  async call(method, path, body) {
    const r = await fetch(this.base + path, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const v = await r.json();
    if (v.value?.error) throw new Error(`${method} ${path}: ${v.value.error}: ${v.value.message}`);
    return v.value;
  }
  async start(binary) {
    const v = await this.call('POST', '/session', { capabilities: { alwaysMatch: { 'webkitgtk:browserOptions': { binary, args: [] } } } });
    this.session = v.sessionId;
  }
  find(css) {
    return this.call('POST', `/session/${this.session}/element`, { using: 'css selector', value: css }).then((e) => e[ELEMENT]);
  }
  click(el) {
    return this.call('POST', `/session/${this.session}/element/${el}/click`, {});
  }
  type(el, text) {
    return this.call('POST', `/session/${this.session}/element/${el}/value`, { text });
  }
  script(js) {
    return this.call('POST', `/session/${this.session}/execute/sync`, { script: js, args: [] });
  }
}

/**
 * Launch the app through WebKitWebDriver with `env` on top of the test's; its port, the
 * driver and the app's pid. The app and the driver are killed when the test ends.
 */
export async function launch(t, extraEnv) {
  for (const [what, v] of [['HEARTH_DESKTOP_BIN', APP], ['HEARTH_TEST_MODEL', MODEL], ['HEARTH_DESKTOP_SCRATCH (run via tests/desktop/run.sh)', SCRATCH]]) {
    assert.ok(v, `${what} is not set`);
  }
  assert.ok(existsSync(APP), `${APP} does not exist: build the workspace first`);
  assert.ok(existsSync('/usr/bin/WebKitWebDriver'), 'WebKitWebDriver is missing (package webkit2gtk-driver)');
  mkdirSync(ARTIFACTS, { recursive: true });

  const port = await freePort();
  const wdPort = await freePort();
  const env = {
    ...process.env,
    TAURI_WEBVIEW_AUTOMATION: 'true',
    HEARTH_PORT: String(port),
    HEARTH_PARALLEL: '2',
    HEARTH_CTX: '2048',
    HEARTH_KEY_STORAGE: 'file',
    RUST_LOG: 'info',
    ...extraEnv,
  };
  const driver = spawn('WebKitWebDriver', [`--port=${wdPort}`], { env, stdio: ['ignore', 'inherit', 'inherit'] });
  t.after(() => driver.kill('SIGKILL'));
  await until('WebKitWebDriver', 15_000, async () => (await fetch(`http://127.0.0.1:${wdPort}/status`)).ok);

  const wd = new WebDriver(wdPort);
  await wd.start(APP);
  const appPid = Number(await until('the app process', 20_000, () => sh('pgrep', ['-n', '-f', APP_COMMAND]).trim()));
  t.after(() => {
    try {
      process.kill(appPid, 'SIGKILL');
    } catch {
      // already gone, as it should be
    }
  });
  return { port, wd, appPid };
}

/** Wait for the app's window; fails at once if the app exits first (a panic at start). */
export async function appWindow(appPid) {
  return until('the Hearth window', 60_000, () => {
    try {
      process.kill(appPid, 0);
    } catch {
      throw new Error('the app exited before its window appeared');
    }
    return sh('xdotool', ['search', '--name', '^Hearth$']).trim();
  }, { fatal: /exited before/ });
}

/** Wait until the app process has exited and none is left. */
export async function assertGone(appPid) {
  await until('the app process to exit', 15_000, () => {
    try {
      process.kill(appPid, 0);
      return false;
    } catch {
      return true;
    }
  });
  const left = processes(APP_COMMAND);
  assert.equal(left, '', 'a hearth-desktop process is left');
}

/** The pids of the processes whose command line matches `pattern` (pgrep -f), or ''. */
export function processes(pattern) {
  try {
    return sh('pgrep', ['-f', pattern]).trim();
  } catch {
    return ''; // pgrep exits 1 when nothing matches
  }
}
