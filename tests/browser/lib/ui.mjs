// Steps and observations on Hearth's web UI, by the data-testid names the UI defines
// (ui/src/components). Every wait is bounded.

import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** /work/main/test-artifacts (git-ignored), wherever the clone is. */
export const ARTIFACTS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'test-artifacts');

/** A prompt that keeps the default tiny model busy for a while. */
export const LONG_STORY =
  'Write a very long story, at least fifteen paragraphs, about a dragon who wants to become a baker. ' +
  'Describe every character, every place and every cake in great detail.';

export const sel = (testId) => `[data-testid="${testId}"]`;

/** Fails with a clear message when the node does not serve the built UI at `/`. */
export async function assertServesUi(node) {
  const res = await fetch(`${node.url}/`, { signal: AbortSignal.timeout(10_000) });
  const html = await res.text();
  assert.ok(
    res.ok && html.includes('id="root"'),
    `the node does not serve the web UI at ${node.url}/ (status ${res.status}); build it with ` +
      '`npm ci && npm run build` in ui/ and make sure the node serves ui/dist',
  );
}

/** Opens the UI of `node` (optionally at a hash route) and waits for the app to be up. */
export async function openApp(page, node, hash = '#/') {
  await assertServesUi(node);
  await page.goto(`${node.url}/${hash}`, { waitUntil: 'domcontentloaded', timeout: 30_000 });
  await page.locator(sel('header-model')).waitFor({ timeout: 15_000 });
  await page.waitForFunction(
    (s) => document.querySelector(s)?.getAttribute('data-state') === 'ready',
    sel('header-model'),
    { timeout: 30_000 },
  );
}

export async function screenshot(page, name) {
  await mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/** Types a message in the composer and sends it with Enter. */
export async function sendMessage(page, text) {
  const input = page.locator(sel('composer-input'));
  await input.fill(text);
  await input.press('Enter');
}

/** The conversation id in the URL (`#/c/<id>`), waiting for it to appear. */
export async function conversationId(page) {
  await page.waitForFunction(() => /^#\/c\/.+/.test(location.hash), null, { timeout: 15_000 });
  return decodeURIComponent(await page.evaluate(() => location.hash.slice('#/c/'.length)));
}

/** id, status and text of the last answer bubble (null when there is none). */
export function lastAnswer(page) {
  return page.evaluate(() => {
    const all = document.querySelectorAll('[data-testid="answer"]');
    const a = all[all.length - 1];
    if (!a) return null;
    return {
      id: a.getAttribute('data-message-id'),
      status: a.getAttribute('data-status'),
      text: a.querySelector('[data-testid="message-content"]')?.textContent ?? '',
      count: all.length,
    };
  });
}

/** Waits until the last answer satisfies `statuses` (and `minChars`, and is not `notId`). */
export async function waitForAnswer(page, { statuses, minChars = 0, notId = null, timeout = 60_000 }) {
  await page
    .waitForFunction(
      ({ statuses, minChars, notId }) => {
        const all = document.querySelectorAll('[data-testid="answer"]');
        const a = all[all.length - 1];
        if (!a || a.getAttribute('data-message-id') === notId) return false;
        const text = a.querySelector('[data-testid="message-content"]')?.textContent ?? '';
        return statuses.includes(a.getAttribute('data-status')) && text.length >= minChars;
      },
      { statuses, minChars, notId },
      { timeout, polling: 50 },
    )
    .catch(async (e) => {
      const last = await lastAnswer(page).catch(() => null);
      if (last && last.text.length > 200) last.text = `${last.text.slice(0, 200)}… (${last.text.length} chars)`;
      throw new Error(`${e.message}\nlast answer: ${JSON.stringify(last)}`);
    });
  return lastAnswer(page);
}

/**
 * Records every change of the last answer's text length (with its status) from now on, in
 * `window.__renders`; read them with `renders(page)`.
 */
export async function recordRenders(page) {
  await page.evaluate(() => {
    const renders = [];
    window.__renders = renders;
    let last = -1;
    const record = () => {
      const all = document.querySelectorAll('[data-testid="answer"]');
      const a = all[all.length - 1];
      if (!a) return;
      const len = (a.querySelector('[data-testid="message-content"]')?.textContent ?? '').length;
      if (len !== last) {
        last = len;
        renders.push({ len, status: a.getAttribute('data-status'), at: performance.now() });
      }
    };
    new MutationObserver(record).observe(document.body, {
      subtree: true,
      childList: true,
      characterData: true,
      attributes: true,
      attributeFilter: ['data-status'],
    });
  });
}

export function renders(page) {
  return page.evaluate(() => window.__renders ?? []);
}

/** Asserts the page does not scroll sideways (the layout holds at this width). */
export async function assertNoHorizontalOverflow(page, where) {
  const { scroll, client } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
  assert.ok(scroll <= client, `${where}: the page is ${scroll}px wide in a ${client}px window`);
}
