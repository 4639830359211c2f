// Scenario 7: the conversation list: search matches message text (through the node), inline
// rename saves with Enter, delete asks first and then removes the conversation.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { openApp, screenshot, sel } from '../lib/ui.mjs';

async function api(node, method, path, body) {
  const res = await fetch(`${node.url}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.headers.get('content-type')?.includes('json') ? res.json() : res.text();
}

test('search, rename and delete conversations', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t);
  const penguins = await api(node, 'POST', '/api/conversations', { title: 'Birds' });
  await api(node, 'POST', `/api/conversations/${penguins.id}/chat`, { content: 'Tell me one fact about penguins.' });
  const other = await api(node, 'POST', '/api/conversations', { title: 'Groceries' });

  const { page, problems } = await openBrowser(t);
  await openApp(page, node);
  const item = (id) => page.locator(`${sel('conversation-item')}[data-conversation-id="${id}"]`);
  await item(penguins.id).waitFor();
  await item(other.id).waitFor();

  // Search by a word that is only in a message, not in any title.
  await page.locator(sel('conversation-search')).fill('PENGUINS');
  await item(other.id).waitFor({ state: 'detached' });
  await item(penguins.id).waitFor();
  await page.locator(sel('conversation-search')).fill('');
  await item(other.id).waitFor();

  // Open one, rename it inline.
  await item(penguins.id).locator(sel('conversation-title')).click();
  await page.locator(sel('answer')).first().waitFor();
  await item(penguins.id).locator(sel('conversation-rename')).click();
  await page.locator(sel('rename-input')).fill('Penguin facts');
  await page.locator(sel('rename-input')).press('Enter');
  await item(penguins.id).locator(sel('conversation-title')).filter({ hasText: 'Penguin facts' }).waitFor();
  await page.locator(sel('chat-title')).filter({ hasText: 'Penguin facts' }).waitFor();
  assert.equal((await apiGet(node, `/api/conversations/${penguins.id}`)).conversation.title, 'Penguin facts');

  // Delete asks first; cancel keeps it, confirm removes it and leaves the chat view empty.
  await item(penguins.id).locator(sel('conversation-delete')).click();
  await item(penguins.id).locator(sel('delete-cancel')).click();
  await item(penguins.id).locator(sel('conversation-delete')).click();
  await screenshot(page, '07-sidebar-delete');
  await item(penguins.id).locator(sel('delete-confirm')).click();
  await item(penguins.id).waitFor({ state: 'detached' });
  await page.waitForFunction(() => location.hash === '#/', null, { timeout: 5_000 });
  const left = (await apiGet(node, '/api/conversations')).conversations.map((c) => c.id);
  assert.deepEqual(left, [other.id]);

  assert.deepEqual(problems, []);
});
