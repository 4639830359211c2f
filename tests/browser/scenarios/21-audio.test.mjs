// Scenario 21: a model whose projector hears (written by tests/fixtures/make_audio_projector.py,
// random weights) is marked "Audio" on the Models page. In the chat a WAV clip attached with the
// button waits as a player (its size shown), goes with the message, gets an answer, is stored
// with the conversation (deleting the chat names it) and plays in the thread after a reload; a
// file the node does not read (Ogg) is refused in the composer at once.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { symlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { openApp, screenshot, sel, waitForAnswer } from '../lib/ui.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** One second of a 440 Hz tone, 16 kHz 16-bit mono, as a WAV file. */
function toneWav() {
  const rate = 16_000;
  const samples = Buffer.alloc(rate * 2);
  for (let i = 0; i < rate; i++) {
    samples.writeInt16LE(Math.round(Math.sin((i * 440 * 2 * Math.PI) / rate) * 12_000), i * 2);
  }
  const head = Buffer.alloc(44);
  head.write('RIFF', 0);
  head.writeUInt32LE(36 + samples.length, 4);
  head.write('WAVEfmt ', 8);
  head.writeUInt32LE(16, 16);
  head.writeUInt16LE(1, 20);
  head.writeUInt16LE(1, 22);
  head.writeUInt32LE(rate, 24);
  head.writeUInt32LE(rate * 2, 28);
  head.writeUInt16LE(2, 32);
  head.writeUInt16LE(16, 34);
  head.write('data', 36);
  head.writeUInt32LE(samples.length, 40);
  return Buffer.concat([head, samples]);
}

test('a model that hears is marked Audio and answers a clip sent from the chat', { timeout: 180_000 }, async (t) => {
  const { model, modelId } = testEnvironment();
  const models = await tempDataDir(t);
  await symlink(model, join(models, basename(model)));
  const made = spawnSync(
    join(ROOT, '.venv/bin/python'),
    [join(ROOT, 'tests/fixtures/make_audio_projector.py'), '--model', model, '--out', join(models, `mmproj-${basename(model)}`)],
    { encoding: 'utf8' },
  );
  assert.equal(made.status, 0, made.stderr);
  const node = await startNode(t, { modelsDir: models });
  const { page, problems } = await openBrowser(t);

  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const row = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await row.locator(sel('model-audio')).waitFor({ timeout: 15_000 });
  assert.equal(await row.locator(sel('model-audio')).textContent(), 'Audio');
  assert.equal(await row.locator(sel('model-vision')).count(), 0);

  const created = await fetch(`${node.url}/api/conversations`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ title: 'A tone' }),
  }).then((r) => r.json());
  await fetch(`${node.url}/api/conversations/${created.id}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ settings: { max_tokens: 8 } }),
  });
  await openApp(page, node, `#/c/${created.id}`);
  // The composer offers audio once the status says the model hears.
  await page.waitForFunction((s) => /or audio/.test(document.querySelector(s)?.textContent ?? ''), sel('composer-hint'), {
    timeout: 15_000,
  });

  const wav = toneWav();
  await page.locator(sel('attach-input')).setInputFiles({ name: 'tone.wav', mimeType: 'audio/wav', buffer: wav });
  const attachment = page.locator(`${sel('attachment')}[data-kind="audio"]`);
  await attachment.waitFor({ timeout: 10_000 });
  assert.equal(await attachment.locator('audio').count(), 1);
  assert.equal(await attachment.locator('.attachment-size').innerText(), '31.3 KB');
  await page.locator(sel('composer-input')).fill('What do you hear?');
  await screenshot(page, '21-audio-attached');
  await page.locator(sel('send-button')).click();
  await waitForAnswer(page, { statuses: ['complete'], minChars: 1, timeout: 120_000 });
  assert.equal(await page.locator(sel('attachment')).count(), 0, 'the clip stayed in the composer after sending');

  const stored = await apiGet(node, `/api/conversations/${created.id}`);
  assert.deepEqual(
    stored.messages[0].audio.map((a) => [a.format, a.size]),
    [['wav', wav.length]],
  );
  const file = await fetch(`${node.url}/api/audio/${stored.messages[0].audio[0].id}`);
  assert.equal(file.headers.get('content-type'), 'audio/wav');
  assert.ok(Buffer.from(await file.arrayBuffer()).equals(wav));

  // After a reload the thread plays the stored clip: the browser reads its one second.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.locator(sel('message-audio')).waitFor({ timeout: 15_000 });
  await page.waitForFunction(
    (s) => {
      const a = document.querySelector(s);
      return a !== null && a.readyState >= 1 && Math.abs(a.duration - 1) < 0.05;
    },
    sel('message-audio'),
    { timeout: 15_000 },
  );
  await screenshot(page, '21-audio-thread');

  // Deleting the chat names the clip it takes with it.
  const item = page.locator(`${sel('conversation-item')}[data-conversation-id="${created.id}"]`);
  await item.locator(sel('conversation-delete')).click();
  assert.equal(await item.locator(sel('delete-question')).innerText(), 'Delete this chat and its audio clip (31.3 KB)?');
  await item.locator(sel('delete-cancel')).click();

  // Ogg is not read: refused in the composer, nothing attached.
  await page.locator(sel('attach-input')).setInputFiles({ name: 'song.ogg', mimeType: 'audio/ogg', buffer: Buffer.from('OggS') });
  await page.waitForFunction((s) => /song\.ogg is neither an image nor audio/.test(document.querySelector(s)?.textContent ?? ''), sel('composer-hint'), {
    timeout: 10_000,
  });
  assert.equal(await page.locator(sel('attachment')).count(), 0);
  assert.deepEqual(problems, []);
});
