// Scenario 4: the node is killed (SIGKILL) mid-answer and started again on the same data dir;
// the conversation shows the partial answer, marked interrupted.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode, tempDataDir } from '../lib/node.mjs';
import { conversationId, LONG_STORY, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('a killed node keeps the partial answer, marked interrupted after restart', { timeout: 240_000 }, async (t) => {
  const dataDir = await tempDataDir(t);
  const first = await startNode(t, { dataDir });
  const { page, problems } = await openBrowser(t);
  await openApp(page, first);

  await sendMessage(page, LONG_STORY);
  const id = await conversationId(page);
  const streaming = await waitForAnswer(page, { statuses: ['streaming'], minChars: 40, timeout: 60_000 });
  await page.waitForTimeout(600); // at least two saves of the growing answer
  await first.kill();

  // The page notices the broken stream by itself.
  await waitForAnswer(page, { statuses: ['interrupted'], timeout: 15_000 });
  await page.locator(sel('chat-error')).waitFor();

  const second = await startNode(t, { dataDir });
  await openApp(page, second, `#/c/${encodeURIComponent(id)}`);
  const answer = page.locator(`${sel('answer')}[data-message-id="${streaming.id}"]`);
  await answer.waitFor({ timeout: 15_000 });
  const after = await waitForAnswer(page, { statuses: ['interrupted'], minChars: 1, timeout: 15_000 });
  assert.equal(after.id, streaming.id);
  await answer.locator(sel('status-badge')).filter({ hasText: 'Interrupted' }).waitFor();

  const stored = await apiGet(second, `/api/conversations/${id}`);
  const message = stored.messages.find((m) => m.id === streaming.id);
  assert.equal(message.status, 'interrupted');
  assert.ok(message.content.length > 0, 'the text generated before the kill was saved');
  assert.ok(after.text.length > 0);

  await screenshot(page, '04-kill-restart');
  assert.deepEqual(problems, []);
});
