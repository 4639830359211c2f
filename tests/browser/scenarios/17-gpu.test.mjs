// Scenario 17: where the model computes. On Mesa's software Vulkan device (lavapipe, which
// ggml uses only when told to), the Status page's Compute card says the model's layers are on
// the GPU (31 of 31, Vulkan0) and lists the device with its memory and the CPU variant picked;
// the Models page marks the loaded model's row the same way. A node kept on the CPU
// (--gpu-layers 0) says CPU in both places.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode } from '../lib/node.mjs';
import { assertNoHorizontalOverflow, screenshot, sel } from '../lib/ui.mjs';

const LAVAPIPE = { GGML_VK_VISIBLE_DEVICES: '0' };

test('the status and models pages say where the model computes', { timeout: 180_000 }, async (t) => {
  const gpu = await startNode(t, { env: LAVAPIPE });
  const cpu = await startNode(t, { env: LAVAPIPE, args: ['--gpu-layers', '0'] });
  const { page, problems } = await openBrowser(t, { viewport: { width: 800, height: 600 } });

  await page.goto(`${gpu.url}/#/status`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  const placement = page.locator(sel('status-placement'));
  await page.locator(`${sel('status-placement')}[data-backend="Vulkan"]`).waitFor({ timeout: 30_000 });
  assert.equal(await placement.innerText(), 'GPU 31/31 · Vulkan0');
  const device = page.locator(`${sel('status-device')}[data-device="Vulkan0"]`);
  await device.waitFor({ timeout: 15_000 });
  assert.equal(await device.getAttribute('data-kind'), 'gpu');
  assert.match(await device.innerText(), /llvmpipe/);
  assert.match(await device.innerText(), /Vulkan GPU/);
  assert.equal(await page.locator(`${sel('status-device')}[data-kind="cpu"]`).count(), 1);
  assert.match(await page.locator(sel('status-cpu-variant')).innerText(), /CPU code: \S+/);
  await assertNoHorizontalOverflow(page, 'status with the compute card');
  await screenshot(page, '17-gpu-status');

  await page.goto(`${gpu.url}/#/models`, { waitUntil: 'domcontentloaded' });
  const row = page.locator(`${sel('model-row')}[data-model-id="${gpu.modelId}"]`);
  const badge = row.locator(sel('model-placement'));
  await badge.waitFor({ timeout: 15_000 });
  assert.equal(await badge.getAttribute('data-backend'), 'Vulkan');
  assert.equal(await badge.textContent(), 'GPU 31/31 · Vulkan0');

  await page.goto(`${cpu.url}/#/status`, { waitUntil: 'domcontentloaded' });
  await page.locator(`${sel('status-placement')}[data-backend="CPU"]`).waitFor({ timeout: 30_000 });
  assert.equal(await page.locator(sel('status-placement')).innerText(), 'CPU');
  await page.goto(`${cpu.url}/#/models`, { waitUntil: 'domcontentloaded' });
  const cpuBadge = page.locator(`${sel('model-row')}[data-model-id="${cpu.modelId}"] ${sel('model-placement')}`);
  await cpuBadge.waitFor({ timeout: 15_000 });
  assert.equal(await cpuBadge.textContent(), 'CPU');
  assert.deepEqual(problems, []);
});
