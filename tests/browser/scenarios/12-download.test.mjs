// Scenario 12: a model downloaded from the hub on the Models page. A node on an empty models
// folder takes models from `tests/hub_server.py` (a Hugging Face-style hub on loopback, slowed
// down so the progress shows); a bad name is refused with the reason; the download shows its
// progress bar and speed, and once its SHA-256 is checked the model is in the table and loads.

import assert from 'node:assert/strict';
import { mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startHub } from '../lib/hub.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

test('a model is downloaded from the Models page, with its progress, and loads', { timeout: 180_000 }, async (t) => {
  const { model } = testEnvironment();
  const hub = await startHub(t, ['--repo', 'hearth-test/Tiny-GGUF', '--path', 'Tiny-Q4.gguf', '--file', model]);
  const { size } = await stat(model);
  // About eight seconds for the whole file.
  const control = await fetch(`${hub}/_control`, { method: 'POST', body: JSON.stringify({ rate: Math.floor(size / 8) }) });
  assert.equal(control.status, 200);
  const scratch = await tempDataDir(t);
  const modelsDir = join(scratch, 'models');
  await mkdir(modelsDir);
  const node = await startNode(t, { modelsDir, withModel: false, args: ['--hub-url', hub] });

  const { page, problems } = await openBrowser(t);
  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const field = page.locator(sel('download-name'));
  await field.waitFor({ timeout: 15_000 });

  // A name that is a path: refused, with the reason, in the card.
  await field.fill('../tiny.gguf');
  await page.locator(sel('download-start')).click();
  const refused = page.locator(sel('download-error'));
  await refused.waitFor({ timeout: 10_000 });
  assert.match(await refused.innerText(), /OWNER\/REPO\/FILE\.gguf/);

  await field.fill('hearth-test/Tiny-GGUF/Tiny-Q4.gguf');
  await page.locator(sel('download-start')).click();
  const item = page.locator(`${sel('download')}[data-download-id="Tiny-Q4.gguf"]`);
  await item.waitFor({ timeout: 10_000 });
  // The bar moves, with the bytes, speed and time left beside it.
  await page.waitForFunction(
    (s) => Number(document.querySelector(s)?.getAttribute('data-progress') ?? 0) > 10,
    `${sel('download')}[data-download-id="Tiny-Q4.gguf"] ${sel('download-progress')}`,
    { timeout: 30_000 },
  );
  assert.match(await item.locator(sel('download-state')).innerText(), /Downloading .* of .*\/s/);
  await screenshot(page, '12-download-progress');

  // Done and checked: the model is in the table and loads.
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'done', `${sel('download')}[data-download-id="Tiny-Q4.gguf"]`, {
    timeout: 60_000,
  });
  const row = page.locator(`${sel('model-row')}[data-model-id="Tiny-Q4"]`);
  await row.waitFor({ timeout: 15_000 });
  await row.locator(sel('model-load')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-loaded') === 'true', `${sel('model-row')}[data-model-id="Tiny-Q4"]`, {
    timeout: 60_000,
  });
  await screenshot(page, '12-download-loaded');
  assert.equal((await stat(join(modelsDir, 'Tiny-Q4.gguf'))).size, size);
  assert.deepEqual(problems, []);
});
