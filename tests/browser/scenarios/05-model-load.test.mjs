// Scenario 5: on the Models page the model is unloaded and loaded again; while it loads
// (stretched to 3 s by HEARTH_MIN_LOAD_MS) the progress bar shows rising progress and the
// header shows the loading state.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { openApp, screenshot, sel } from '../lib/ui.mjs';

test('unload and load a model with a progress bar', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t, { env: { HEARTH_MIN_LOAD_MS: '3000' } });
  const { page, problems } = await openBrowser(t);
  await openApp(page, node, '#/models');

  const row = page.locator(`${sel('model-row')}[data-model-id="${node.modelId}"]`);
  await row.and(page.locator('[data-loaded="true"]')).waitFor();
  if (node.modelId === 'SmolLM2-135M-Instruct.Q4_1') {
    // The default model's header facts: size, quantization, architecture, parameters.
    const text = await row.innerText();
    for (const fact of ['MB', 'Q4_1', 'llama', '135M']) assert.ok(text.includes(fact), `${fact} missing from ${JSON.stringify(text)}`);
  }

  await row.locator(sel('model-unload')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'empty', sel('header-model'), {
    timeout: 15_000,
  });
  await row.and(page.locator('[data-loaded="false"]')).waitFor();
  assert.equal((await apiGet(node, '/api/models')).state, 'empty');

  // Record the progress bar and header state from now on.
  await page.evaluate(() => {
    const seen = { progress: [], header: [] };
    window.__loading = seen;
    const sample = () => {
      const bar = document.querySelector('[data-testid="model-progress"]');
      if (bar) {
        const p = Number(bar.getAttribute('data-progress'));
        if (seen.progress.at(-1) !== p) seen.progress.push(p);
      }
      const state = document.querySelector('[data-testid="header-model"]')?.getAttribute('data-state');
      if (seen.header.at(-1) !== state) seen.header.push(state);
    };
    const timer = setInterval(sample, 25);
    // A last sample when stopping: the header may have turned ready less than 25 ms ago.
    window.__stopLoading = () => {
      clearInterval(timer);
      sample();
    };
  });

  await row.locator(sel('model-load')).click();
  await page.locator(sel('model-progress')).waitFor({ timeout: 5_000 });
  await page.waitForFunction(
    () => (window.__loading?.progress ?? []).some((p) => p > 0 && p < 100),
    null,
    { timeout: 10_000 },
  );
  await screenshot(page, '05-model-loading');
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'ready', sel('header-model'), {
    timeout: 60_000,
  });
  await page.locator(sel('model-progress')).waitFor({ state: 'detached', timeout: 5_000 });
  await row.and(page.locator('[data-loaded="true"]')).waitFor();

  const seen = await page.evaluate(() => {
    window.__stopLoading();
    return window.__loading;
  });
  assert.ok(seen.progress.length >= 2, `expected rising progress, saw ${JSON.stringify(seen.progress)}`);
  for (let i = 1; i < seen.progress.length; i++) {
    assert.ok(seen.progress[i] >= seen.progress[i - 1], `progress went back: ${JSON.stringify(seen.progress)}`);
  }
  assert.ok(seen.progress.every((p) => p >= 0 && p <= 100));
  assert.ok(seen.header.includes('loading'), `the header showed ${JSON.stringify(seen.header)}`);
  assert.equal(seen.header.at(-1), 'ready');
  const models = await apiGet(node, '/api/models');
  assert.equal(models.loaded, node.modelId);
  // The loaded row shows its context (the pool its slots share) and the pool's memory.
  const status = await apiGet(node, '/api/status');
  const context = row.locator(sel('model-context'));
  assert.equal(await context.getAttribute('data-context'), String(status.model.context));
  assert.match(await context.innerText(), /context · .+ f16 KV/i);

  await screenshot(page, '05-model-load');
  assert.deepEqual(problems, []);
});
