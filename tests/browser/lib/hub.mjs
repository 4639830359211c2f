// The loopback hub (`tests/hub_server.py`, a Hugging Face-style hub written from its documented
// HTTP surface) as a test's child: started with the fixture's arguments, killed with the test.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** Starts the hub with `args` (its repository, files, listed repositories); its base URL. */
export async function startHub(t, args) {
  const child = spawn(join(ROOT, '.venv/bin/python'), [join(ROOT, 'tests/hub_server.py'), ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  t.after(() => child.kill());
  const first = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the hub exited (${code})`)));
  });
  const port = /^port (\d+)$/.exec(first)?.[1];
  assert.ok(port, `the hub's first line: ${first}`);
  return `http://127.0.0.1:${port}`;
}
