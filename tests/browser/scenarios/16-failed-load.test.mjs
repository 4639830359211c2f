// Scenario 16: loading a model that fails (a file whose header reads but whose tensors are
// missing) while another is loaded: the header stays on the model that works, ready, and the
// failure shows on the failed model's own row, as LM Studio keeps the model that works.

import assert from 'node:assert/strict';
import { copyFile, link, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

test('a failed load leaves the working model in the header and shows on its row', { timeout: 180_000 }, async (t) => {
  const { model } = testEnvironment();
  const modelsDir = join(await tempDataDir(t), 'models');
  await mkdir(modelsDir);
  const alpha = join(modelsDir, 'alpha.gguf');
  await link(model, alpha).catch(() => copyFile(model, alpha));
  // The model's first 16 MiB: llama.cpp reads the header, then finds no tensors.
  const bytes = await readFile(model);
  await writeFile(join(modelsDir, 'broken.gguf'), bytes.subarray(0, 16 << 20));
  const node = await startNode(t, { modelsDir, args: ['--model', alpha] });
  const { page, problems } = await openBrowser(t);
  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const header = page.locator(sel('header-model'));
  await page.locator(`${sel('header-model')}[data-state="ready"]`).waitFor({ timeout: 60_000 });
  assert.equal(await page.locator(sel('header-model-name')).textContent(), 'alpha');

  const broken = page.locator(`${sel('model-row')}[data-model-id="broken"]`);
  await broken.locator(sel('model-load')).click();
  const why = broken.locator(sel('model-load-failed'));
  await why.waitFor({ timeout: 30_000 });
  assert.match(await why.textContent(), /broken\.gguf/);
  await screenshot(page, '16-failed-load');
  // The header is alpha again, ready; no failure banner for the header's model.
  await page.locator(`${sel('header-model')}[data-state="ready"]`).waitFor({ timeout: 15_000 });
  assert.equal(await page.locator(sel('header-model-name')).textContent(), 'alpha');
  assert.equal(await header.getAttribute('data-state'), 'ready');
  assert.equal(await page.locator(sel('model-failed')).count(), 0);
  const alphaRow = page.locator(`${sel('model-row')}[data-model-id="alpha"]`);
  assert.equal(await alphaRow.getAttribute('data-loaded'), 'true');
  assert.deepEqual(problems, []);
});
