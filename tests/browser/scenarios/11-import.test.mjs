// Scenario 11: models another app downloaded. A node on an empty models folder, on a machine
// where Ollama has a model (a manifest naming a blob, made here from the default model),
// offers it on the Models page; one click imports it without a copy, it appears in the table
// and loads; deleting it removes only the link.

import assert from 'node:assert/strict';
import { copyFile, link, lstat, mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

/** An Ollama models folder holding the default model as `tiny` (tag latest). */
async function ollamaFolder(root, model) {
  const hex = '7a'.repeat(32);
  await mkdir(join(root, 'blobs'), { recursive: true });
  const blob = join(root, 'blobs', `sha256-${hex}`);
  await link(model, blob).catch(() => copyFile(model, blob));
  const manifest = join(root, 'manifests/registry.ollama.ai/library/tiny');
  await mkdir(manifest, { recursive: true });
  const layers = [{ mediaType: 'application/vnd.ollama.image.model', digest: `sha256:${hex}`, size: 1 }];
  await writeFile(join(manifest, 'latest'), JSON.stringify({ schemaVersion: 2, layers }));
  return blob;
}

test('a model Ollama downloaded is imported from the Models page without a copy', { timeout: 180_000 }, async (t) => {
  const { model } = testEnvironment();
  const scratch = await tempDataDir(t);
  const blob = await ollamaFolder(join(scratch, 'ollama'), model);
  const modelsDir = join(scratch, 'models');
  await mkdir(modelsDir);
  // HOME is the scratch folder, so that no model of this machine's own apps is offered.
  const node = await startNode(t, {
    modelsDir,
    withModel: false,
    env: { OLLAMA_MODELS: join(scratch, 'ollama'), HOME: scratch },
  });

  const { page, problems } = await openBrowser(t);
  await page.goto(`${node.url}/#/models`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const offered = page.locator(`${sel('importable')}[data-model-id="tiny"]`);
  await offered.waitFor({ timeout: 15_000 });
  assert.match(await offered.innerText(), /Ollama/);
  await screenshot(page, '11-import-offered');
  await offered.locator(sel('import-one')).click();

  const row = page.locator(`${sel('model-row')}[data-model-id="tiny"]`);
  await row.waitFor({ timeout: 15_000 });
  await row.locator(sel('model-linked')).waitFor({ timeout: 5_000 });
  assert.ok((await lstat(join(modelsDir, 'tiny.gguf'))).isSymbolicLink(), 'imported as a link');
  assert.equal(await page.locator(sel('import-card')).count(), 0, 'nothing left to import');

  await row.locator(sel('model-load')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-loaded') === 'true', `${sel('model-row')}[data-model-id="tiny"]`, {
    timeout: 60_000,
  });
  await screenshot(page, '11-import-loaded');

  // Unloaded, it can be deleted: the link goes, Ollama's file stays.
  await row.locator(sel('model-unload')).click();
  await row.locator(sel('model-delete')).click();
  assert.match(await row.locator(sel('model-delete-ask')).innerText(), /link/);
  await row.locator(sel('model-delete-confirm')).click();
  await row.waitFor({ state: 'detached', timeout: 15_000 });
  await assert.rejects(lstat(join(modelsDir, 'tiny.gguf')));
  assert.ok((await stat(blob)).isFile());
  assert.deepEqual(problems, []);
});
