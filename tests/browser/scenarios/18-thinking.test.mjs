// Scenario 18: a reasoning model's thinking is folded above its answer. The node runs the
// scripted engine with a fixed answer that opens with a <think> block; the chat shows the
// answer alone, and the thinking under a closed "Thought" fold that opens on a click. The
// stored message keeps the whole text.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { conversationId, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

const ANSWER = ['<think>', 'The user greets me.', ' A greeting back.', '</think>\n\n', 'Hello', ' from Hearth!'];

test('thinking is folded above the answer', { timeout: 120_000 }, async (t) => {
  const node = await startNode(t, { env: { HEARTH_SCRIPTED_ANSWER: ANSWER.join('|') } });
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);
  await sendMessage(page, 'Hi!');
  const final = await waitForAnswer(page, { statuses: ['complete'], minChars: 1 });
  assert.equal(final.text.trim(), 'Hello from Hearth!');

  const answer = page.locator(sel('answer')).last();
  const fold = answer.locator(sel('thinking'));
  assert.equal(await fold.count(), 1);
  assert.equal(await fold.evaluate((d) => d.open), false, 'the thinking starts folded');
  assert.equal(await answer.locator('summary').innerText(), 'Thought');
  const thought = answer.locator(sel('thinking-content'));
  assert.equal(await thought.isVisible(), false);
  await answer.locator('summary').click();
  await thought.waitFor({ state: 'visible' });
  assert.equal(await thought.innerText(), 'The user greets me. A greeting back.');

  const id = await conversationId(page);
  const stored = await apiGet(node, `/api/conversations/${id}`);
  assert.equal(stored.messages[1].content, ANSWER.join(''));
  await screenshot(page, '18-thinking');
  assert.deepEqual(problems, []);
});
