// The desktop app end to end, as a user would meet it: launch the real Tauri binary in the X
// server and D-Bus session that run.sh made, wait for its window, take a screenshot, type a
// chat message into the real window through WebKitWebDriver, confirm through the node's API
// that the message and a streamed answer were stored, then click Quit in the tray menu over
// D-Bus (its status line counts a second node that joins the cluster) and confirm the port is
// closed and no process is left. And a new machine: the app on
// an empty models folder opens (it panicked once) on the Models page, and loads a model added
// while it runs. And a new user's documents: a 300-page PDF picked in the window is read (in
// a child that is the app itself), and a question about page 40 is answered with its word
// and the page as the first source.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { basename, join, dirname } from 'node:path';
import { test } from 'node:test';
import { APP, ARTIFACTS, MODEL, ROOT, SCRATCH, appWindow, assertGone, launch, portOpen, sh, sleep, until } from './lib.mjs';

/** The app's unique D-Bus name: the connection whose process is the app. */
function busNameOf(pid) {
  const names = sh('gdbus', ['call', '--session', '-d', 'org.freedesktop.DBus', '-o', '/org/freedesktop/DBus', '-m', 'org.freedesktop.DBus.ListNames']);
  for (const name of names.match(/':[0-9.]+'/g) ?? []) {
    const n = name.slice(1, -1);
    try {
      const out = sh('gdbus', ['call', '--session', '-d', 'org.freedesktop.DBus', '-o', '/org/freedesktop/DBus', '-m', 'org.freedesktop.DBus.GetConnectionUnixProcessID', n]);
      if (out.match(/uint32 (\d+)/)?.[1] === String(pid)) return n;
    } catch {
      // a connection that went away meanwhile
    }
  }
  return null;
}

const MENU = '/org/ayatana/NotificationItem/tray_icon_tray_app_main/Menu';

/** Tray menu items by label (GTK keeps a mnemonic underscore). */
function trayItems(bus) {
  const layout = sh('gdbus', ['call', '--session', '-d', bus, '-o', MENU, '-m', 'com.canonical.dbusmenu.GetLayout', '--', '0', '-1', '@as []']);
  const items = {};
  for (const m of layout.matchAll(/\((\d+), \{([^}]*)\}/g)) {
    const label = m[2].match(/'label': <'([^']*)'>/)?.[1];
    if (label) items[label.replace('_', '')] = { id: m[1], checked: m[2].match(/'toggle-state': <(\d)>/)?.[1] };
  }
  return items;
}

function clickTray(bus, id) {
  sh('gdbus', ['call', '--session', '-d', bus, '-o', MENU, '-m', 'com.canonical.dbusmenu.Event', '--', id, 'clicked', '<int32 0>', '0']);
}

test('the desktop app: window, chat through the window, quit from the tray', { timeout: 240_000 }, async (t) => {
  const { port, wd, appPid } = await launch(t, { HEARTH_DATA_DIR: join(SCRATCH, 'hearth'), HEARTH_MODEL: MODEL });

  // The window appears; the node inside answers.
  await appWindow(appPid);
  await until('the node', 60_000, async () => {
    const s = await (await fetch(`http://127.0.0.1:${port}/api/status`)).json();
    return s.model.state === 'ready';
  });
  assert.equal(await wd.script('return location.origin'), 'tauri://localhost');

  // Chat through the real window: type, press Enter.
  const input = await until('the composer', 30_000, () => wd.find('[data-testid="composer-input"]'));
  await wd.type(input, 'Say hello to the desktop.');
  await wd.type(input, '\uE007');
  const stored = await until('the answer stored through the API', 120_000, async () => {
    const list = await (await fetch(`http://127.0.0.1:${port}/api/conversations`)).json();
    if (list.conversations.length !== 1) return null;
    const c = await (await fetch(`http://127.0.0.1:${port}/api/conversations/${list.conversations[0].id}`)).json();
    const [user, answer] = c.messages;
    return answer?.status === 'complete' ? { user, answer } : null;
  });
  assert.equal(stored.user.content, 'Say hello to the desktop.');
  assert.ok(stored.answer.content.length > 0);
  assert.ok(stored.answer.stats.tokens > 0);
  await until('the answer on screen', 20_000, async () =>
    (await wd.script('return document.querySelector(\'[data-testid="answer"]\')?.dataset.status')) === 'complete',
  );
  await sleep(1500); // WebKit under Xvfb paints late: before any input the window is still blank
  sh('import', ['-window', 'root', join(ARTIFACTS, 'desktop-chat.png')]);

  // The tray menu, over D-Bus: pause and resume, then Quit.
  const bus = await until('the app on the session bus', 20_000, () => busNameOf(appPid));
  const items = await until('the tray menu', 20_000, () => {
    const i = trayItems(bus);
    return i.Quit ? i : null;
  });
  for (const label of ['Open Hearth', 'Expose to LAN', 'Pause serving', 'Quit']) {
    assert.ok(items[label], `tray menu lacks ${label}: ${JSON.stringify(items)}`);
  }
  // The status line (Linux trays show no tooltip): model, thermal level and speed.
  const statusLine = await until('the status line in the tray menu', 10_000, () =>
    Object.keys(trayItems(bus)).find((l) => l.startsWith('Hearth · SmolLM2') && l.includes('tok/s')),
  );
  assert.match(statusLine, /thermal (nominal|fair|serious|critical)/);
  assert.match(statusLine, /peers: 0/);
  // Where the model computes: this machine's CPU (no GPU here).
  assert.match(statusLine, /SmolLM2-135M-Instruct\.Q4_1 on CPU/);
  // A second node joins the desktop's cluster: the status line counts it.
  const { port: clusterPort } = await (await fetch(`http://127.0.0.1:${port}/api/cluster`)).json();
  const peer = spawn(join(dirname(APP), 'hearth-node'), [
    'serve', '--port', '0', '--cluster-port', '0', '--key-storage', 'file', '--name', 'desk-peer',
    '--data-dir', join(SCRATCH, 'desk-peer'), '--peer', `127.0.0.1:${clusterPort}`,
  ], { stdio: 'ignore' });
  t.after(() => peer.kill('SIGKILL'));
  await until('the peer counted in the tray', 30_000, () =>
    Object.keys(trayItems(bus)).some((l) => l.startsWith('Hearth · SmolLM2') && l.includes('peers: 1')),
  );
  peer.kill('SIGKILL');
  const status = async () => (await fetch(`http://127.0.0.1:${port}/api/status`)).json();
  clickTray(bus, items['Pause serving'].id);
  await until('serving paused', 10_000, async () => (await status()).paused === true && (await status()).throttle === 0);
  clickTray(bus, items['Pause serving'].id);
  await until('serving resumed', 10_000, async () => (await status()).paused === false);
  clickTray(bus, items.Quit.id);

  await until('the port to close', 15_000, async () => !(await portOpen(port)));
  await assertGone(appPid);
});

test('a new machine: the app opens on an empty models folder and serves once a model is added', { timeout: 240_000 }, async (t) => {
  const models = join(SCRATCH, 'empty-models');
  mkdirSync(models, { recursive: true });
  const { port, wd, appPid } = await launch(t, { HEARTH_DATA_DIR: join(SCRATCH, 'new-machine'), HEARTH_MODELS_DIR: models });
  const status = async () => (await fetch(`http://127.0.0.1:${port}/api/status`)).json();

  await appWindow(appPid);
  assert.equal((await status()).model.state, 'empty');
  // The window opens on the Models page, which says where models go.
  await until('the Models page', 30_000, async () => (await wd.script('return location.hash')) === '#/models');
  const where = await until('the no-model card', 30_000, () =>
    wd.script('return document.querySelector(\'[data-testid="models-dir"]\')?.textContent'),
  );
  assert.equal(where, models);
  await sleep(1500); // WebKit under Xvfb paints late
  sh('import', ['-window', 'root', join(ARTIFACTS, 'desktop-no-model.png')]);

  // A model copied into the folder shows up; Load in the window; it answers.
  copyFileSync(MODEL, join(models, basename(MODEL)));
  const load = await until('the model row', 30_000, () => wd.find('[data-testid="model-load"]'));
  await wd.call('POST', `/session/${wd.session}/element/${load}/click`, {});
  await until('the model ready', 60_000, async () => (await status()).model.state === 'ready');
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 }),
  });
  assert.equal(r.status, 200);
  assert.equal((await r.json()).usage.completion_tokens > 0, true);

  process.kill(appPid, 'SIGTERM');
  await until('the port to close', 15_000, async () => !(await portOpen(port)));
  await assertGone(appPid);
});

test('a new user picks a PDF manual in the window and asks about page 40: the answer has it, with the page as its source', { timeout: 240_000 }, async (t) => {
  const docs = join(SCRATCH, 'documents');
  execFileSync(join(ROOT, '.venv/bin/python'), [join(ROOT, 'tests/fixtures/make_documents.py'), '--out', docs], { timeout: 60_000 });
  const { port, wd, appPid } = await launch(t, { HEARTH_DATA_DIR: join(SCRATCH, 'documents-user'), HEARTH_MODEL: MODEL });
  const api = async (path, init) => (await fetch(`http://127.0.0.1:${port}${path}`, init)).json();
  await appWindow(appPid);
  await until('the node', 60_000, async () => (await api('/api/status')).model.state === 'ready');

  // Picked with the attach button's file input: the desktop app reads it in a child process
  // that is hearth-desktop itself.
  const picker = await until('the composer', 30_000, () => wd.find('[data-testid="attach-input"]'));
  await wd.script('document.querySelector(\'[data-testid="attach-input"]\').hidden = false');
  await wd.type(picker, join(docs, 'manual.pdf'));
  await wd.script('document.querySelector(\'[data-testid="attach-input"]\').hidden = true');
  const kept = await until('the manual read and kept', 60_000, async () => {
    const list = await api('/api/conversations');
    if (list.conversations.length !== 1) return null;
    const id = list.conversations[0].id;
    const { documents } = await api(`/api/conversations/${id}/documents`);
    return documents.length === 1 ? { id, document: documents[0] } : null;
  });
  assert.equal(kept.document.pages, 300);
  await until('the manual shown above the composer', 20_000, () =>
    wd.script('return document.querySelector(\'[data-testid="document"]\')?.dataset.name === "manual.pdf"'),
  );
  // Greedy and short, so the answer is the same on every run.
  await api(`/api/conversations/${kept.id}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ settings: { temperature: 0, max_tokens: 24 } }),
  });
  const input = await wd.find('[data-testid="composer-input"]');
  await wd.type(input, 'What is the code word of page 40?');
  await wd.type(input, '\uE007');
  const answer = await until('the answer', 120_000, async () => {
    const c = await api(`/api/conversations/${kept.id}`);
    const a = c.messages.find((m) => m.role === 'assistant');
    return a?.status === 'complete' ? a : null;
  });
  assert.match(answer.content, /amber-ember-40/);
  assert.equal(answer.sources.path, 'passages');
  assert.deepEqual([answer.sources.items[0].n, answer.sources.items[0].page], [1, 40]);
  await until('the sources on screen', 20_000, () =>
    wd.script('return document.querySelector(\'[data-testid="source"]\')?.textContent === "[1] manual.pdf · page 40"'),
  );
  await sleep(1500); // WebKit under Xvfb paints late
  sh('import', ['-window', 'root', join(ARTIFACTS, 'desktop-documents.png')]);
  process.kill(appPid, 'SIGTERM');
  await until('the port to close', 15_000, async () => !(await portOpen(port)));
  await assertGone(appPid);
});
