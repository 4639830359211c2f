// Scenario 20: a model with a vision projector beside it (written by
// tests/fixtures/make_projector.py, random weights) is marked "Vision" on the Models page, and
// a chat request with an image gets an answer from it; the same model without the projector
// carries no mark.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { symlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { screenshot, sel } from '../lib/ui.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
// A 1x1 red PNG.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==';

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

  await page.goto(`${plain.url}/#/models`, { waitUntil: 'domcontentloaded' });
  const plainRow = page.locator(`${sel('model-row')}[data-model-id="${modelId}"]`);
  await plainRow.waitFor({ timeout: 15_000 });
  assert.equal(await plainRow.locator(sel('model-vision')).count(), 0);
  assert.deepEqual(problems, []);
});
