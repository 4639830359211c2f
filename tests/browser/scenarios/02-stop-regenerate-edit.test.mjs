// Scenario 2: settings are saved; a long answer is stopped with the Stop button (status
// stopped); Regenerate replaces it (and Esc stops that one); Edit-and-resend replaces the
// user message and everything after it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode } from '../lib/node.mjs';
import { conversationId, LONG_STORY, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('stop, regenerate, edit and resend', { timeout: 240_000 }, async (t) => {
  const node = await startNode(t);
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);

  // A conversation with settings that favour long answers.
  await page.locator(sel('new-chat')).click();
  const id = await conversationId(page);
  await page.locator(sel('settings-toggle')).click();
  await page.locator(sel('settings-system-prompt')).fill('You are a storyteller. Your stories are long and detailed.');
  await page.locator(sel('settings-max-tokens')).fill('1500');
  await page.locator(sel('settings-save')).click();
  await page.locator(sel('settings-message')).filter({ hasText: 'Saved' }).waitFor();
  await page.locator(sel('settings-close')).click();
  const settings = (await apiGet(node, `/api/conversations/${id}`)).conversation.settings;
  assert.equal(settings.max_tokens, 1500);
  assert.match(settings.system_prompt, /storyteller/);

  // Stop mid-answer.
  await sendMessage(page, LONG_STORY);
  await waitForAnswer(page, { statuses: ['streaming'], minChars: 20, timeout: 60_000 });
  await page.locator(sel('stop-button')).click();
  const stopped = await waitForAnswer(page, { statuses: ['stopped'], timeout: 20_000 });
  await page.locator(sel('answer')).last().locator(sel('status-badge')).filter({ hasText: 'Stopped' }).waitFor();
  await page.locator(sel('send-button')).waitFor();

  // Regenerate, and stop that one with Esc.
  await page.locator(sel('regenerate-button')).click();
  await waitForAnswer(page, { statuses: ['streaming'], minChars: 10, notId: stopped.id, timeout: 60_000 });
  await page.keyboard.press('Escape');
  const regenerated = await waitForAnswer(page, { statuses: ['stopped'], notId: stopped.id, timeout: 20_000 });
  assert.equal(regenerated.count, 1, 'regenerate replaces the last answer');
  assert.notEqual(regenerated.id, stopped.id);

  // Edit the user message and resend: a short question gets a complete answer.
  const userMessage = page.locator(sel('user-message')).first();
  await userMessage.hover();
  await userMessage.locator(sel('edit-button')).click();
  await page.locator(sel('edit-input')).fill('Say hello in one short sentence.');
  await page.locator(sel('edit-save')).click();
  const edited = await waitForAnswer(page, { statuses: ['complete'], minChars: 1, notId: regenerated.id, timeout: 120_000 });
  assert.equal(edited.count, 1);
  assert.equal(await page.locator(sel('user-message')).count(), 1);
  assert.equal(await page.locator(sel('user-message')).first().locator(sel('message-content')).innerText(), 'Say hello in one short sentence.');

  const stored = await apiGet(node, `/api/conversations/${id}`);
  assert.deepEqual(
    stored.messages.map((m) => [m.role, m.status]),
    [
      ['user', 'complete'],
      ['assistant', 'complete'],
    ],
  );
  assert.equal(stored.messages[0].content, 'Say hello in one short sentence.');
  assert.equal(stored.messages[1].id, edited.id);

  await screenshot(page, '02-stop-regenerate-edit');
  assert.deepEqual(problems, []);
});
