// Scenario 6: the Status page (open in a second window at 800x600) updates live while an
// answer streams in the first: busy slots and tokens/s change, and the sparklines grow.
// Both windows keep their layout at 800x600 without horizontal scrolling.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { startNode } from '../lib/node.mjs';
import { assertNoHorizontalOverflow, LONG_STORY, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

test('the status page updates while an answer streams', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t);
  const { context, page: chat, problems } = await openBrowser(t, { viewport: { width: 800, height: 600 } });
  const status = await context.newPage();
  await openApp(chat, node);
  await openApp(status, node, '#/status');
  await assertNoHorizontalOverflow(chat, 'chat');

  // Connected and idle: slots show active/total.
  await status.waitForFunction((s) => /^\d+\/2$/.test(document.querySelector(s)?.textContent ?? ''), sel('status-slots'), {
    timeout: 15_000,
  });
  assert.notEqual(await status.locator(sel('status-thermal')).innerText(), '—');
  assert.match(await status.locator(sel('status-cpu')).innerText(), /%$/);
  assert.match(await status.locator(sel('status-memory')).innerText(), /\//);
  await assertNoHorizontalOverflow(status, 'status');

  await status.evaluate(() => {
    const seen = { active: [], tps: [] };
    window.__status = seen;
    const read = (id) => document.querySelector(`[data-testid="${id}"]`)?.getAttribute('data-value') ?? '';
    setInterval(() => {
      for (const [key, id] of [
        ['active', 'status-slots'],
        ['tps', 'status-tokens-per-s'],
      ]) {
        const v = read(id);
        if (seen[key].at(-1) !== v) seen[key].push(v);
      }
    }, 100);
  });
  const pointsBefore = Number(await status.locator(sel('sparkline-tokens-per-s')).getAttribute('data-points'));

  await sendMessage(chat, LONG_STORY);
  await waitForAnswer(chat, { statuses: ['streaming'], minChars: 1, timeout: 60_000 });
  // Snapshots come once a second: within a few seconds a busy slot or a rate shows up.
  await status.waitForFunction(
    () => {
      const s = window.__status;
      return s.active.some((v) => Number(v) >= 1) || s.tps.some((v) => Number(v) > 0);
    },
    null,
    { timeout: 15_000, polling: 100 },
  );
  await screenshot(status, '06-status-live');
  await chat.locator(sel('stop-button')).click().catch(() => undefined); // ended already is fine
  await waitForAnswer(chat, { statuses: ['stopped', 'complete'], timeout: 30_000 });
  await assertNoHorizontalOverflow(chat, 'chat with an answer');

  // After the answer, the rate and busy slots fall back: the values changed both ways.
  await status.waitForTimeout(2_500);
  const seen = await status.evaluate(() => window.__status);
  assert.ok(seen.active.length >= 2 || seen.tps.length >= 2, `status values did not change: ${JSON.stringify(seen)}`);
  const pointsAfter = Number(await status.locator(sel('sparkline-tokens-per-s')).getAttribute('data-points'));
  assert.ok(pointsAfter > pointsBefore, `the sparkline did not grow (${pointsBefore} -> ${pointsAfter})`);

  await screenshot(chat, '06-chat-800x600');
  assert.deepEqual(problems, []);
});
