// A real Hearth node for one test: started from $HEARTH_NODE_BIN on port 0 with a temp data
// dir and $HEARTH_TEST_MODEL, stopped (or killed) by the test, and killed in any case when
// the test process exits. Every wait here is bounded.

import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';

/** How long a node may take to print its listening line. */
const LISTEN_TIMEOUT_MS = 30_000;
/** How long a node may take to report its model ready (HEARTH_MIN_LOAD_MS adds to it). */
const READY_TIMEOUT_MS = 90_000;
/** Grace period between SIGTERM and SIGKILL (the node promises to exit within 5 s). */
const STOP_GRACE_MS = 8_000;
/** Lines of the node's output kept for error messages. */
const LOG_LINES = 200;

const LISTENING = /^Hearth is listening on (http:\/\/\S+)/;
const READY = /^Model .* is ready/;
const NO_MODEL = /^No model yet/;
const LOAD_FAILED = /could not be loaded/;

const running = new Set();
process.on('exit', () => {
  for (const child of running) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});

/** The node binary and model from the environment, or a clear reason why not. */
export function testEnvironment() {
  const bin = process.env.HEARTH_NODE_BIN;
  if (!bin) {
    throw new Error(
      'HEARTH_NODE_BIN is not set: point it at a built hearth-node binary, e.g. ' +
        'HEARTH_NODE_BIN=$PWD/target/release/hearth-node npm test',
    );
  }
  if (!existsSync(bin) || !statSync(bin).isFile()) throw new Error(`HEARTH_NODE_BIN=${bin} does not exist`);
  const model = process.env.HEARTH_TEST_MODEL;
  if (!model) {
    throw new Error(
      'HEARTH_TEST_MODEL is not set: point it at a GGUF file, e.g. ' +
        'HEARTH_TEST_MODEL=~/.local/share/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf',
    );
  }
  if (!existsSync(model)) throw new Error(`HEARTH_TEST_MODEL=${model} does not exist`);
  return { bin, model, modelId: basename(model).replace(/\.gguf$/i, '') };
}

/** A fresh temp data dir, removed when the test ends. */
export async function tempDataDir(t) {
  const dir = await mkdtemp(join(tmpdir(), 'hearth-browser-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Starts a node and waits until its model is ready.
 * `t` is the node:test context (the node is stopped after the test); `dataDir` is reused
 * for a restart; `env` adds environment variables (e.g. HEARTH_MIN_LOAD_MS). With
 * `modelsDir` the node starts on that folder without naming a model, and is returned once it
 * says it has none (`withModel: false`) or once the one it found is ready. `args` are added
 * to the command line; `ctx` is the context per slot.
 */
export async function startNode(t, { dataDir, env = {}, modelsDir, withModel = true, ctx = 2048, args: extra = [] } = {}) {
  const { bin, model, modelId } = testEnvironment();
  const dir = dataDir ?? (await tempDataDir(t));
  const args = [
    'serve',
    '--port', '0',
    '--data-dir', dir,
    // The model's own folder, so that /api/models lists it (the data dir has no models/).
    ...(modelsDir ? ['--models-dir', modelsDir] : ['--models-dir', dirname(model), '--model', model]),
    '--parallel', '2',
    '--ctx', String(ctx),
    // The node's key in a file in the temp data dir, never the user's keyring.
    '--key-storage', 'file',
    ...extra,
  ];
  const child = spawn(bin, args, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  const log = [];
  const remember = (prefix) => (line) => {
    log.push(`${prefix}${line}`);
    if (log.length > LOG_LINES) log.shift();
  };
  const stdout = createInterface({ input: child.stdout });
  let fail = () => undefined;
  const failEarly = new Promise((_, reject) => {
    fail = reject;
  });
  // Once ready, a later exit is the test's business (e.g. kill()): never an unhandled rejection.
  failEarly.catch(() => undefined);
  const rememberStderr = remember('[stderr] ');
  createInterface({ input: child.stderr }).on('line', (line) => {
    rememberStderr(line);
    if (LOAD_FAILED.test(line)) fail(new Error(`the node could not load the model: ${line}`));
  });
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      fail(new Error(`the node exited (code ${code}, signal ${signal}) before it was ready`));
      resolve({ code, signal });
    });
  });

  const node = {
    url: '',
    dataDir: dir,
    modelId,
    process: child,
    logs: () => log.join('\n'),
    /** SIGKILL, as a crash or power loss would: nothing is flushed. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await withTimeout(exited, STOP_GRACE_MS, 'the node to die after SIGKILL');
    },
    /** SIGTERM, then SIGKILL if it does not exit in time. */
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      await exited;
      clearTimeout(timer);
    },
  };
  t.after(() => node.stop());

  const lines = lineWaiter(stdout, remember('[stdout] '));
  try {
    const first = await Promise.race([lines.next(), failEarly, timeout(LISTEN_TIMEOUT_MS, 'the listening line')]);
    const m = LISTENING.exec(first);
    if (!m) throw new Error(`unexpected first line from the node: ${JSON.stringify(first)}`);
    node.url = m[1].replace(/\/+$/, '');
    for (;;) {
      const line = await Promise.race([lines.next(), failEarly, timeout(READY_TIMEOUT_MS, '"Model ... is ready"')]);
      if (READY.test(line)) break;
      if (NO_MODEL.test(line)) {
        if (withModel) throw new Error(`the node found no model: ${line}`);
        break;
      }
    }
  } catch (e) {
    await node.stop();
    throw new Error(`${e.message}\n--- node output ---\n${node.logs()}`);
  }
  return node;
}

/** Line-by-line reader: `next()` resolves with the next stdout line. */
function lineWaiter(rl, remember) {
  const queue = [];
  const waiting = [];
  rl.on('line', (line) => {
    remember(line);
    const w = waiting.shift();
    if (w) w(line);
    else queue.push(line);
  });
  return {
    next: () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((resolve) => waiting.push(resolve))),
  };
}

function timeout(ms, what) {
  return new Promise((_, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    timer.unref();
  });
}

export function withTimeout(promise, ms, what) {
  return Promise.race([promise, timeout(ms, what)]);
}

/** JSON from the node's API (for assertions on what it stored). */
export async function apiGet(node, path) {
  const res = await fetch(`${node.url}${path}`, { signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}
