// Scenario 14: a model split across two nodes. One node shares its memory (--share-memory) and
// has no model; the other has the default model and the first as its peer. On the second's
// Models page, Split spreads the model's layers over both: the split card shows it serving,
// with half the layers on the peer (named), and the node answers from the split model; "Serve
// whole" ends the split and the card goes.

import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

test('a model is split across two nodes from the Models page, and served whole again', { timeout: 240_000 }, async (t) => {
  const { modelId } = testEnvironment();
  const empty = join(await tempDataDir(t), 'models');
  await mkdir(empty);
  const sharer = await startNode(t, {
    modelsDir: empty,
    withModel: false,
    args: ['--name', 'sharer', '--cluster-port', '0', '--no-discovery', '--share-memory', '1024', '--threads', '1'],
  });
  const status = await (await fetch(`${sharer.url}/api/status`)).json();
  const port = status.cluster?.port;
  assert.ok(port, `the sharing node's cluster port: ${JSON.stringify(status.cluster)}`);
  const owner = await startNode(t, {
    args: ['--name', 'owner', '--cluster-port', '0', '--no-discovery', '--threads', '1', '--memory-limit', '1024', '--peer', `127.0.0.1:${port}`],
  });

  const { page, problems } = await openBrowser(t);
  await page.goto(`${owner.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const row = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await row.waitFor({ timeout: 30_000 });
  await row.locator(sel('model-split')).click();

  const split = page.locator(`${sel('split-row')}[data-model-id="${modelId}"]`);
  await split.waitFor({ timeout: 30_000 });
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'ready', `${sel('split-row')}[data-model-id="${modelId}"]`, {
    timeout: 120_000,
  });
  const peers = split.locator(sel('split-peer'));
  assert.equal(await peers.count(), 1);
  assert.match(await peers.first().innerText(), /sharer .*: 15 layers, about [\d.]+ [KMG]?i?B/);
  assert.match(await split.locator(sel('split-placement')).innerText(), /This machine: 15 layers/);
  await screenshot(page, '14-split-serving');

  // The node answers from the split model (nothing else has it: the sharer has no model).
  const answer = await (
    await fetch(`${owner.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: modelId, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
    })
  ).json();
  assert.ok(answer.choices?.[0]?.message?.content, JSON.stringify(answer));
  const models = await (await fetch(`${owner.url}/api/models`)).json();
  assert.deepEqual(models.loaded_models, [], JSON.stringify(models));

  await split.locator(sel('split-stop')).click();
  await page.locator(sel('split-card')).waitFor({ state: 'detached', timeout: 15_000 });
  assert.deepEqual(problems, []);
});
