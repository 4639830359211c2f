// Scenario 13: a model from a peer of the cluster. Two nodes on loopback: one has the default
// model loaded, the other an empty models folder and the first as its peer. The second's
// Models page offers the model "from a peer" before any download; one click brings it over
// the cluster (its progress names the peer), and it is in the table, marked as also loaded
// on the peer, and loads.

import assert from 'node:assert/strict';
import { mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

test('a model a peer has is offered first and brought over the cluster', { timeout: 240_000 }, async (t) => {
  const { model, modelId } = testEnvironment();
  const first = await startNode(t, { args: ['--name', 'peer-one', '--cluster-port', '0', '--no-discovery'] });
  const status = await (await fetch(`${first.url}/api/status`)).json();
  const port = status.cluster?.port;
  assert.ok(port, `the first node's cluster port: ${JSON.stringify(status.cluster)}`);
  const scratch = await tempDataDir(t);
  const modelsDir = join(scratch, 'models');
  await mkdir(modelsDir);
  const second = await startNode(t, {
    modelsDir,
    withModel: false,
    args: ['--name', 'peer-two', '--cluster-port', '0', '--no-discovery', '--peer', `127.0.0.1:${port}`],
  });

  const { page, problems } = await openBrowser(t);
  await page.goto(`${second.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const offer = page.locator(`${sel('peer-offer')}[data-model-id="${modelId}"]`);
  await offer.waitFor({ timeout: 60_000 });
  assert.match(await offer.innerText(), /peer-one/);
  await screenshot(page, '13-peer-offer');
  await offer.locator(sel('peer-get')).click();

  const item = page.locator(`${sel('download')}[data-download-id="${modelId}.gguf"]`);
  await item.waitFor({ timeout: 15_000 });
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'done', `${sel('download')}[data-download-id="${modelId}.gguf"]`, {
    timeout: 120_000,
  });
  assert.match(await item.innerText(), /from peer-one/);
  const row = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await row.waitFor({ timeout: 15_000 });
  await row.locator(sel('model-on-peers')).waitFor({ timeout: 15_000 });
  assert.match(await row.locator(sel('model-on-peers')).innerText(), /peer-one/);
  assert.equal((await stat(join(modelsDir, `${modelId}.gguf`))).size, (await stat(model)).size);
  await row.locator(sel('model-load')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-loaded') === 'true', `${sel('model-row')}[data-model-id="${modelId}"]`, {
    timeout: 60_000,
  });
  await screenshot(page, '13-peer-loaded');
  assert.deepEqual(problems, []);
});
