// Scenario 3: reloading the page mid-answer shows the conversation and the partial answer
// again; once the node notices the client left, the answer is marked interrupted.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { conversationId, LONG_STORY, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('a reload mid-answer keeps the partial answer, marked interrupted', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t);
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);

  await sendMessage(page, LONG_STORY);
  const id = await conversationId(page);
  const streaming = await waitForAnswer(page, { statuses: ['streaming'], minChars: 40, timeout: 60_000 });
  // Reload at once: the answer must still be streaming when the page comes back.

  await page.reload({ waitUntil: 'domcontentloaded' });
  assert.equal(await page.evaluate(() => location.hash), `#/c/${encodeURIComponent(id)}`);
  const answer = page.locator(`${sel('answer')}[data-message-id="${streaming.id}"]`);
  await answer.waitFor({ timeout: 15_000 });
  await page.locator(`${sel('conversation-item')}[data-conversation-id="${id}"]`).waitFor();
  await page.locator(sel('user-message')).first().waitFor();

  const after = await waitForAnswer(page, { statuses: ['interrupted'], minChars: 1, timeout: 30_000 });
  assert.equal(after.id, streaming.id);
  assert.ok(after.text.length > 0, 'the partial answer is shown');
  await answer.locator(sel('status-badge')).filter({ hasText: 'Interrupted' }).waitFor();

  const stored = await apiGet(node, `/api/conversations/${id}`);
  const message = stored.messages.find((m) => m.id === streaming.id);
  assert.equal(message.status, 'interrupted');
  assert.ok(message.content.length > 0);

  await screenshot(page, '03-reload-interrupted');
  assert.deepEqual(problems, []);
});
