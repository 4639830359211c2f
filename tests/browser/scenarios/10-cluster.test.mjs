// Scenario 10: the Cluster page. A second node that connects to the first appears in the
// peer table (encrypted, with its figures and a live chart), then disappears when it is killed;
// an address that is not HOST:PORT is refused in the form; the page fits 800x600.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { assertNoHorizontalOverflow, openApp, screenshot, sel } from '../lib/ui.mjs';

test('a second node appears on the Cluster page, then disappears when killed', { timeout: 180_000 }, async (t) => {
  const alpha = await startNode(t, { args: ['--name', 'alpha', '--cluster-port', '0'] });
  const { port } = await apiGet(alpha, '/api/cluster');
  const { page, problems } = await openBrowser(t, { viewport: { width: 800, height: 600 } });
  await openApp(page, alpha, '#/cluster');
  await page.locator(sel('cluster-empty')).waitFor({ timeout: 15_000 });
  assert.equal(await page.locator(sel('cluster-peer-count')).innerText(), '0');

  const beta = await startNode(t, { args: ['--name', 'beta', '--cluster-port', '0', '--peer', `127.0.0.1:${port}`] });
  const row = page.locator(`${sel('cluster-peer')}[data-name="beta"]`);
  await row.waitFor({ timeout: 15_000 });
  assert.equal(await row.getAttribute('data-kind'), 'hearth');
  assert.match(await row.innerText(), /encrypted/i);
  assert.equal(await page.locator(sel('cluster-peer-count')).innerText(), '1');
  // The chart fills in, one sample a second.
  await page.waitForFunction((s) => Number(document.querySelector(s)?.getAttribute('data-points')) >= 2, sel('cluster-peer-chart'), {
    timeout: 15_000,
  });
  await assertNoHorizontalOverflow(page, 'cluster');
  await screenshot(page, '10-cluster');

  await beta.kill();
  await row.waitFor({ state: 'detached', timeout: 15_000 });
  await page.locator(sel('cluster-empty')).waitFor({ timeout: 15_000 });

  await page.locator(sel('cluster-address')).fill('not an address');
  await page.locator(sel('cluster-add')).click();
  assert.match(await page.locator(sel('cluster-add-error')).innerText(), /HOST:PORT/);
  assert.deepEqual(problems, []);
});
