// Scenario 1: a message is sent with Enter and its answer visibly grows, token by token,
// before it completes; the answer shows its stats and the conversation is in the sidebar
// and in the URL.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { conversationId, openApp, recordRenders, renders, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('an answer streams in token by token', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t);
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);

  // A new conversation whose settings cap the answer, so the test does not wait for the
  // tiny default model to ramble to the end of its context.
  await page.locator(sel('new-chat')).click();
  await page.locator(sel('settings-toggle')).click();
  await page.locator(sel('settings-max-tokens')).fill('160');
  await page.locator(sel('settings-save')).click();
  await page.locator(sel('settings-message')).waitFor();
  await page.locator(sel('settings-close')).click();

  await recordRenders(page);
  await sendMessage(page, 'Tell me a story about a lighthouse keeper and a storm.');
  await page.locator(sel('user-message')).last().waitFor();
  const id = await conversationId(page);
  const final = await waitForAnswer(page, { statuses: ['complete'], minChars: 1, timeout: 120_000 });
  const stats = await apiGet(node, `/api/conversations/${id}`);
  assert.ok(stats.messages[1].stats.tokens <= 160, 'the max tokens setting was not applied');

  const seen = await renders(page);
  const growing = seen.filter((r) => r.status === 'streaming' && r.len > 0);
  for (let i = 1; i < growing.length; i++) {
    assert.ok(growing[i].len > growing[i - 1].len, `the answer shrank while streaming: ${JSON.stringify(growing)}`);
  }
  assert.ok(growing.length >= 3, `expected at least 3 growing renders before completion, saw ${JSON.stringify(seen)}`);
  assert.ok(growing.at(-1).len <= final.text.length);

  // Stats under the answer, from the node's real figures.
  const answer = page.locator(sel('answer')).last();
  assert.match(await answer.locator(sel('stat-tokens')).innerText(), /^\d+ tokens$/);
  assert.match(await answer.locator(sel('stat-tps')).innerText(), /tok\/s$/);
  assert.match(await answer.locator(sel('stat-ttft')).innerText(), /^TTFT /);
  assert.equal(await answer.locator(sel('stat-model')).innerText(), node.modelId);

  // The conversation is listed and stored.
  await page.locator(`${sel('conversation-item')}[data-conversation-id="${id}"]`).waitFor();
  const stored = await apiGet(node, `/api/conversations/${id}`);
  assert.deepEqual(
    stored.messages.map((m) => [m.role, m.status]),
    [
      ['user', 'complete'],
      ['assistant', 'complete'],
    ],
  );
  assert.equal(stored.messages[1].content.length > 0, true);

  await screenshot(page, '01-stream');
  assert.deepEqual(problems, []);
});
