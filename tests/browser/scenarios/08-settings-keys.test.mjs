// Scenario 8: API keys on the Settings page. Create a key named "laptop": its secret is shown
// once (it starts with hearth_) and the node lists the key as active; after a reload the
// secret is gone but the key is still listed; revoke it (with confirmation) and the node lists
// it as revoked. The node runs on loopback only, so the page says it is not shared.
// Finally a ?token= in the page URL is kept in localStorage and removed from the address bar.
// On the way, the throttle cap ("how much of this machine to give") is set and applied.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { openApp, screenshot, sel } from '../lib/ui.mjs';

test('create an API key, see its secret once, revoke it', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t);
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);

  await page.locator(sel('nav-settings')).click();
  await page.locator(sel('settings-page')).waitFor();
  await page.waitForFunction(() => location.hash === '#/settings', null, { timeout: 5_000 });
  const lan = page.locator(sel('lan-state'));
  await page.waitForFunction((s) => document.querySelector(s)?.getAttribute('data-exposed') !== 'unknown', sel('lan-state'));
  assert.equal(await lan.getAttribute('data-exposed'), 'false', 'a node started without --lan is not shared');
  assert.match(await page.locator(sel('settings-page')).innerText(), /hearth-node serve --lan/);
  assert.deepEqual((await apiGet(node, '/api/keys')).keys, []);

  // How much of the machine to give: set to 40 %, the node applies it.
  await page.waitForFunction((s) => !document.querySelector(s)?.disabled, sel('throttle-cap'), { timeout: 10_000 });
  await page.locator(sel('throttle-cap')).fill('40');
  assert.equal(await page.locator(sel('throttle-cap-value')).innerText(), '40 %');
  await page.locator(sel('throttle-cap-save')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.disabled === true, sel('throttle-cap-save'), { timeout: 10_000 });
  const capped = await apiGet(node, '/api/status');
  assert.equal(capped.throttle_cap, 40);
  assert.equal(capped.throttle, 40);

  // Create: the secret appears once, in the box.
  await page.locator(sel('key-name')).fill('laptop');
  await page.locator(sel('key-create')).click();
  const secretBox = page.locator(sel('key-secret'));
  await secretBox.waitFor();
  const secret = (await secretBox.innerText()).trim();
  assert.match(secret, /^hearth_\S+$/);
  assert.match(await page.locator(sel('key-created')).innerText(), /will not be shown again/);
  assert.equal(await page.locator(sel('key-name')).inputValue(), '', 'the name field is cleared');

  // The node has it, active, under the name given; the visible prefix is the secret's start.
  const listed = (await apiGet(node, '/api/keys')).keys;
  assert.equal(listed.length, 1, JSON.stringify(listed));
  const [key] = listed;
  assert.equal(key.name, 'laptop');
  assert.equal(key.revoked, false);
  assert.equal(key.scope, 'use', 'a new key uses the models only unless asked otherwise');
  assert.ok(secret.startsWith(key.prefix), `secret ${secret.slice(0, 12)}… does not start with prefix ${key.prefix}`);
  assert.ok(!JSON.stringify(listed).includes(secret), 'GET /api/keys must not list the secret');

  const row = page.locator(`${sel('key-row')}[data-key-id="${key.id}"]`);
  await row.waitFor();
  assert.equal(await row.getAttribute('data-revoked'), 'false');
  assert.match(await row.innerText(), /laptop/);
  assert.equal(await row.locator(sel('key-state')).textContent(), 'Active');
  assert.equal(await row.locator(sel('key-scope-cell')).getAttribute('data-scope'), 'use');
  await screenshot(page, '08-settings-keys');

  // A key that manages the node, chosen in the form.
  await page.locator(sel('key-name')).fill('desk');
  await page.locator(sel('key-scope')).selectOption('manage');
  await page.locator(sel('key-create')).click();
  await page.locator(sel('key-secret')).waitFor();
  const desk = (await apiGet(node, '/api/keys')).keys.find((k) => k.name === 'desk');
  assert.equal(desk?.scope, 'manage', JSON.stringify(desk));
  const deskRow = page.locator(`${sel('key-row')}[data-key-id="${desk.id}"]`);
  assert.equal(await deskRow.locator(sel('key-scope-cell')).getAttribute('data-scope'), 'manage');
  await page.locator(sel('key-secret-dismiss')).click();

  // Shown once: after a reload the key is listed but its secret is nowhere on the page.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await row.waitFor();
  assert.equal(await page.locator(sel('key-secret')).count(), 0);
  assert.ok(!(await page.content()).includes(secret), 'the secret is shown again after a reload');

  // Revoke asks first; cancel keeps the key active, confirm revokes it.
  await row.locator(sel('key-revoke')).click();
  await row.locator(sel('key-revoke-cancel')).click();
  assert.equal((await apiGet(node, '/api/keys')).keys.find((k) => k.id === key.id).revoked, false);
  await row.locator(sel('key-revoke')).click();
  await row.locator(sel('key-revoke-confirm')).click();
  await page.waitForFunction(
    (s) => document.querySelector(s)?.getAttribute('data-revoked') === 'true',
    `${sel('key-row')}[data-key-id="${key.id}"]`,
    { timeout: 15_000 },
  );
  assert.equal(await row.locator(sel('key-state')).textContent(), 'Revoked');
  assert.equal(await row.locator(sel('key-revoke')).count(), 0, 'a revoked key has no Revoke button');
  const after = (await apiGet(node, '/api/keys')).keys;
  assert.equal(after.length, 2);
  assert.equal(after.find((k) => k.id === key.id).revoked, true);
  assert.equal(after.find((k) => k.id === desk.id).revoked, false, 'only the key asked for is revoked');

  // A ?token= in the URL is kept for later and removed from the address bar (loopback needs no
  // key, so the app works with any).
  await page.goto(`${node.url}/?token=hearth_from_url#/settings`, { waitUntil: 'domcontentloaded' });
  await page.locator(sel('settings-page')).waitFor();
  await page.waitForFunction(() => location.search === '', null, { timeout: 5_000 });
  assert.equal(await page.evaluate(() => location.hash), '#/settings');
  assert.equal(await page.evaluate(() => localStorage.getItem('hearth.token')), 'hearth_from_url');
  await row.waitFor();

  assert.deepEqual(problems, []);
});
