// Scenario 20: a model with a vision projector beside it (written by
// tests/fixtures/make_projector.py, random weights) is marked "Vision" on the Models page, and
// a chat request with an image gets an answer from it; the same model without the projector
// carries no mark. In the chat, an image pasted into (or dropped on) the composer waits as a preview (its size
// shown, removable), goes with the message, is stored with the conversation and shown in the
// thread after a reload; a zip archive pasted is refused at once, and the model without a projector
// says it cannot see images, keeping nothing of the refused message, which goes back into the
// composer.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { symlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { apiGet } from '../lib/node.mjs';
import { conversationId, openApp, screenshot, sel, waitForAnswer } from '../lib/ui.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
// A 1x1 red PNG.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==';
const PNG_BYTES = Buffer.from(PNG, 'base64').length;

/** A 160x100 PNG of stripes, drawn by the browser: its bytes, base64. */
function drawnPng(page) {
  return page.evaluate(async () => {
    const canvas = document.createElement('canvas');
    canvas.width = 160;
    canvas.height = 100;
    const g = canvas.getContext('2d');
    for (let x = 0; x < 160; x += 20) {
      g.fillStyle = x % 40 === 0 ? '#e03020' : '#2040e0';
      g.fillRect(x, 0, 20, 100);
    }
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
    const bytes = new Uint8Array(await blob.arrayBuffer());
    return btoa(String.fromCharCode(...bytes));
  });
}

/** Pastes a file into the composer, as the browser does for a copied screenshot. */
async function paste(page, base64, type, name) {
  await page.locator(sel('composer-input')).focus();
  await page.evaluate(
    ({ base64, type, name }) => {
      const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
      const data = new DataTransfer();
      data.items.add(new File([bytes], name, { type }));
      const target = document.querySelector('[data-testid="composer-input"]');
      target.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
    },
    { base64, type, name },
  );
}

/** Drops a file on the composer, as one dragged from the desktop is. */
async function drop(page, base64, type, name) {
  await page.evaluate(
    ({ base64, type, name }) => {
      const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
      const data = new DataTransfer();
      data.items.add(new File([bytes], name, { type }));
      const form = document.querySelector('form.composer');
      for (const kind of ['dragover', 'drop']) {
        form.dispatchEvent(new DragEvent(kind, { dataTransfer: data, bubbles: true, cancelable: true }));
      }
    },
    { base64, type, name },
  );
}

test('a model with a projector is marked Vision and answers about an image', { timeout: 180_000 }, async (t) => {
  const { model, modelId } = testEnvironment();
  const models = await tempDataDir(t);
  await symlink(model, join(models, basename(model)));
  const made = spawnSync(
    join(ROOT, '.venv/bin/python'),
    [join(ROOT, 'tests/fixtures/make_projector.py'), '--model', model, '--out', join(models, `mmproj-${basename(model)}`)],
    { encoding: 'utf8' },
  );
  assert.equal(made.status, 0, made.stderr);
  const vision = await startNode(t, { modelsDir: models });
  const plain = await startNode(t);
  const { page, problems } = await openBrowser(t);

  await page.goto(`${vision.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const row = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await row.locator(sel('model-vision')).waitFor({ timeout: 15_000 });
  assert.equal(await row.locator(sel('model-vision')).textContent(), 'Vision');
  await screenshot(page, '20-vision-models');

  const res = await fetch(`${vision.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: modelId,
      max_tokens: 8,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
            { type: 'text', text: 'What colour is it?' },
          ],
        },
      ],
    }),
  });
  const answer = await res.json();
  assert.equal(res.status, 200, JSON.stringify(answer));
  assert.equal(typeof answer.choices[0].message.content, 'string');

  // The chat: paste, see the preview, remove it, paste again, send.
  const created = await fetch(`${vision.url}/api/conversations`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ title: 'A picture' }),
  }).then((r) => r.json());
  await fetch(`${vision.url}/api/conversations/${created.id}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ settings: { max_tokens: 8 } }),
  });
  await openApp(page, vision, `#/c/${created.id}`);
  await paste(page, PNG, 'image/png', 'red.png');
  const attachment = page.locator(sel('attachment'));
  await attachment.waitFor({ timeout: 10_000 });
  assert.equal(await attachment.locator('.attachment-size').innerText(), `${PNG_BYTES} B`);
  await attachment.locator(sel('attachment-remove')).click();
  assert.equal(await page.locator(sel('attachment')).count(), 0);
  // Dropped on the composer, it waits the same way.
  await drop(page, PNG, 'image/png', 'dropped.png');
  await attachment.waitFor({ timeout: 10_000 });
  await attachment.locator(sel('attachment-remove')).click();
  assert.equal(await page.locator(sel('attachment')).count(), 0);
  const stripes = await drawnPng(page);
  const stripesBytes = Buffer.from(stripes, 'base64').length;
  await paste(page, stripes, 'image/png', 'stripes.png');
  await attachment.waitFor({ timeout: 10_000 });
  await page.locator(sel('composer-input')).fill('What colour is it?');
  await screenshot(page, '20-vision-pasted');
  await page.locator(sel('send-button')).click();
  await waitForAnswer(page, { statuses: ['complete'], minChars: 1, timeout: 120_000 });
  assert.equal(await page.locator(sel('attachment')).count(), 0, 'the preview stayed after sending');

  const stored = await apiGet(vision, `/api/conversations/${created.id}`);
  assert.deepEqual(
    stored.messages[0].images.map((i) => [i.mime, i.width, i.height, i.size]),
    [['image/png', 160, 100, stripesBytes]],
  );
  assert.equal(stored.conversation.images, 1);
  const file = await fetch(`${vision.url}/api/images/${stored.messages[0].images[0].id}`);
  assert.equal(file.headers.get('content-type'), 'image/png');
  assert.equal(Buffer.from(await file.arrayBuffer()).toString('base64'), stripes);

  // After a reload the thread shows the stored picture.
  await page.reload({ waitUntil: 'domcontentloaded' });
  const shown = page.locator(sel('message-image'));
  await shown.waitFor({ timeout: 15_000 });
  await page.waitForFunction((s) => document.querySelector(s)?.naturalWidth === 160, sel('message-image'), {
    timeout: 10_000,
  });
  await screenshot(page, '20-vision-thread');

  // A zip archive is neither an image nor a document: refused in the composer, nothing attached.
  await paste(page, Buffer.from('PK\x03\x04').toString('base64'), 'application/zip', 'archive.zip');
  await page.waitForFunction((s) => /archive\.zip is not an image/.test(document.querySelector(s)?.textContent ?? ''), sel('composer-hint'), {
    timeout: 10_000,
  });
  assert.equal(await page.locator(sel('attachment')).count(), 0);

  await page.goto(`${plain.url}/#/models`, { waitUntil: 'domcontentloaded' });
  const plainRow = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await plainRow.waitFor({ timeout: 15_000 });
  assert.equal(await plainRow.locator(sel('model-vision')).count(), 0);

  // Without a projector the model says it cannot see, and the message is not kept.
  await openApp(page, plain);
  await paste(page, PNG, 'image/png', 'red.png');
  await page.locator(sel('attachment')).waitFor({ timeout: 10_000 });
  await page.locator(sel('composer-input')).fill('What is it?');
  await page.locator(sel('send-button')).click();
  const error = page.locator(sel('chat-error'));
  await error.waitFor({ timeout: 30_000 });
  assert.match(await error.innerText(), /cannot see images/);
  const id = await conversationId(page);
  const refused = await apiGet(plain, `/api/conversations/${id}`);
  assert.deepEqual(refused.messages, []);
  // Nothing is lost: the words and the image are back in the composer.
  await page.locator(sel('attachment')).waitFor({ timeout: 10_000 });
  assert.equal(await page.locator(sel('composer-input')).inputValue(), 'What is it?');
  await screenshot(page, '20-vision-refused');
  assert.deepEqual(problems, []);
});
