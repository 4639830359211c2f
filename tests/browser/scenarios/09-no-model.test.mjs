// Scenario 9: a new machine with no model. The node starts on an empty models folder, the UI
// opens on the Models page and says where models go, the chat door answers "no model is
// loaded"; a model copied into the folder shows up without a reload, loads with one click and
// answers a chat, all without restarting the node.

import assert from 'node:assert/strict';
import { copyFile, mkdir } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { assertServesUi, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('a node with no model opens on the Models page and serves once one is added', { timeout: 180_000 }, async (t) => {
  const { model, modelId } = testEnvironment();
  const modelsDir = join(await tempDataDir(t), 'models');
  await mkdir(modelsDir);
  // A short context bounds the chat's answer below (a sampled answer may run on to the end of
  // it; on a busy machine 4,096 tokens took longer than the wait for it).
  const node = await startNode(t, { modelsDir, withModel: false, ctx: 256 });

  // Every door says so in its own shape; here the OpenAI one.
  const res = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }] }),
  });
  assert.equal(res.status, 503);
  assert.equal((await res.json()).error.message, 'no model is loaded');

  const { page, problems } = await openBrowser(t);
  await assertServesUi(node);
  await page.goto(`${node.url}/`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  await page.waitForFunction(() => location.hash === '#/models', null, { timeout: 15_000 });
  await page.locator(sel('no-model')).waitFor({ timeout: 15_000 });
  assert.equal(await page.locator(sel('models-dir')).innerText(), modelsDir);
  await screenshot(page, '09-no-model');

  // The user copies a model into the folder: it shows without a reload, and loads.
  await copyFile(model, join(modelsDir, basename(model)));
  const row = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await row.waitFor({ timeout: 15_000 });
  await row.locator(sel('model-load')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'ready', sel('header-model'), {
    timeout: 60_000,
  });
  assert.equal(await page.locator(sel('no-model')).count(), 0);

  // And it answers, through the UI's chat.
  await page.goto(`${node.url}/#/`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  await sendMessage(page, 'Say hello.');
  await waitForAnswer(page, { statuses: ['complete'], minChars: 1 });
  assert.deepEqual(problems, []);
});
