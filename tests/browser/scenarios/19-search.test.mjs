// Scenario 19: a model found with the hub's search on the Models page. A node on an empty
// models folder searches `tests/hub_server.py` (the hub's documented search on loopback): the
// matching repositories come most downloaded first, each file with its quantisation, its size
// and whether it fits this machine (a file larger than any machine is marked too large, and so
// is a small model whose vision projector, marked Vision, is); one click downloads a file with
// its progress, and it lands in the models table.

import assert from 'node:assert/strict';
import { mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startHub } from '../lib/hub.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { assertNoHorizontalOverflow, screenshot, sel } from '../lib/ui.mjs';

const SPEC = 'hearth-test/Tiny-GGUF/Tiny-Q4_K_M.gguf';

/** The hub's arguments: the default model as SPEC, a listed repository far too large, and one
 * whose projector is. */
const hubArgs = (model) => [
  '--repo', 'hearth-test/Tiny-GGUF', '--path', 'Tiny-Q4_K_M.gguf', '--file', model,
  '--listed', 'other/Tiny-Huge-GGUF:50:Tiny-Huge-Q8_0.gguf:999999999999999',
  '--listed', 'other/Tiny-Vision-GGUF:20:Tiny-Vision-Q4_0.gguf:1000:mmproj-Tiny-Vision-f16.gguf:999999999999999',
];

test('a model found by searching the hub downloads with one click', { timeout: 180_000 }, async (t) => {
  const { model } = testEnvironment();
  const hub = await startHub(t, hubArgs(model));
  const { size } = await stat(model);
  // About four seconds for the whole file, so the progress shows.
  assert.equal((await fetch(`${hub}/_control`, { method: 'POST', body: JSON.stringify({ rate: Math.floor(size / 4) }) })).status, 200);
  const scratch = await tempDataDir(t);
  const modelsDir = join(scratch, 'models');
  await mkdir(modelsDir);
  const node = await startNode(t, { modelsDir, withModel: false, args: ['--hub-url', hub] });

  const { page, problems } = await openBrowser(t, { viewport: { width: 800, height: 700 } });
  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const query = page.locator(sel('search-query'));
  await query.waitFor({ timeout: 15_000 });
  await query.fill('tiny');
  await page.locator(sel('search-submit')).click();
  await page.locator(sel('search-repo')).first().waitFor({ timeout: 15_000 });
  const repos = await page.locator(sel('search-repo')).evaluateAll((all) => all.map((r) => r.getAttribute('data-repo-id')));
  assert.deepEqual(repos, ['hearth-test/Tiny-GGUF', 'other/Tiny-Huge-GGUF', 'other/Tiny-Vision-GGUF']);

  const file = page.locator(`${sel('search-file')}[data-spec="${SPEC}"]`);
  assert.equal(await file.getAttribute('data-fits'), 'true');
  assert.match(await file.innerText(), /Q4_K_M/);
  assert.match(await file.locator(sel('search-fit')).innerText(), /^Fits/);
  const huge = page.locator(`${sel('search-file')}[data-spec="other/Tiny-Huge-GGUF/Tiny-Huge-Q8_0.gguf"]`);
  assert.equal(await huge.getAttribute('data-fits'), 'false');
  assert.match(await huge.locator(sel('search-fit')).innerText(), /Too large for this machine/);
  assert.equal(await huge.locator(sel('search-vision')).count(), 0);
  const vision = page.locator(`${sel('search-file')}[data-spec="other/Tiny-Vision-GGUF/Tiny-Vision-Q4_0.gguf"]`);
  assert.equal(await vision.locator(sel('search-vision')).textContent(), 'Vision');
  assert.equal(await vision.getAttribute('data-fits'), 'false');
  await assertNoHorizontalOverflow(page, 'search results');
  await screenshot(page, '19-search-results');

  await file.locator(sel('search-download')).click();
  const item = page.locator(`${sel('download')}[data-download-id="Tiny-Q4_K_M.gguf"]`);
  await item.waitFor({ timeout: 10_000 });
  await page.waitForFunction(
    (s) => Number(document.querySelector(s)?.getAttribute('data-progress') ?? 0) > 5,
    `${sel('download')}[data-download-id="Tiny-Q4_K_M.gguf"] ${sel('download-progress')}`,
    { timeout: 30_000 },
  );
  assert.equal(await file.locator(sel('search-download')).innerText(), 'Started');
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'done', `${sel('download')}[data-download-id="Tiny-Q4_K_M.gguf"]`, {
    timeout: 60_000,
  });
  await page.locator(`${sel('model-row')}[data-model-id="Tiny-Q4_K_M"]`).waitFor({ timeout: 15_000 });

  // Searched again, the file is here.
  await page.locator(sel('search-submit')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.textContent === 'Here', `${sel('search-file')}[data-spec="${SPEC}"] ${sel('search-download')}`, {
    timeout: 15_000,
  });
  assert.deepEqual(problems, []);
});
