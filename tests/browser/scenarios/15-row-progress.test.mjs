// Scenario 15: a model loaded for a request, not by the user, shows its load's progress on
// its own row of the Models page. Two names for the default model; the first is loaded at
// start, the second on demand by a chat request, each load stretched to 7 s by
// HEARTH_MIN_LOAD_MS (the page lists the folder every 3 s); the header's model stays the
// first.

import assert from 'node:assert/strict';
import { copyFile, link, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

test('a model loading for a request shows its progress on its row', { timeout: 180_000 }, async (t) => {
  const { model } = testEnvironment();
  const modelsDir = join(await tempDataDir(t), 'models');
  await mkdir(modelsDir);
  for (const name of ['alpha', 'beta']) {
    const to = join(modelsDir, `${name}.gguf`);
    await link(model, to).catch(() => copyFile(model, to));
  }
  const node = await startNode(t, {
    modelsDir,
    env: { HEARTH_MIN_LOAD_MS: '7000' },
    args: ['--model', join(modelsDir, 'alpha.gguf')],
  });
  const { page, problems } = await openBrowser(t);
  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const beta = page.locator(`${sel('model-row')}[data-model-id="beta"]`);
  await beta.waitFor({ timeout: 15_000 });
  assert.equal(await beta.locator(sel('model-row-progress')).count(), 0, 'not loading yet');

  // A request naming beta loads it (the answer waits for the load).
  const answer = fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'beta', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] }),
  });
  const bar = beta.locator(sel('model-row-progress'));
  await bar.waitFor({ timeout: 10_000 });
  const now = Number(await bar.getAttribute('aria-valuenow'));
  assert.ok(now >= 0 && now <= 100, `progress ${now}`);
  await screenshot(page, '15-row-progress');
  // The header's model is still alpha: its big loading card is not shown for beta.
  assert.equal(await page.locator(sel('model-loading')).count(), 0);

  const r = await answer;
  assert.equal(r.status, 200, await r.text());
  await bar.waitFor({ state: 'detached', timeout: 15_000 });
  await beta.and(page.locator('[data-loaded="true"]')).waitFor({ timeout: 15_000 });
  assert.deepEqual(problems, []);
});
