// Scenario 22: MCP tools in the chat (issue 51). The node runs the scripted engine on a copy of
// the test model whose chat template knows tools (tests/tools_model.py), answering each request
// with the next of its scripted answers: first a Hermes tool call of `py__echo`, then a plain
// answer. The MCP server is our Python test server (tests/mcp/py_server.py over stdio), added
// the way a user adds one: Settings → Tools → Add a server, a command and its arguments.
//
// A: ask; the answer's call shows as a card (server, tool, the arguments as readable JSON, the
//    four consent buttons); Allow once runs it: the card shows the server's result and the loop's
//    next answer follows; after a reload the card (done, with its result) and the answer are
//    still there.
// B: Deny with a reason: the card says denied and why, the call never ran (no result), the node
//    keeps the reason (what the model is told), and the next answer follows; a reload keeps it.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode, tempDataDir, testEnvironment } from '../lib/node.mjs';
import { conversationId, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const PYTHON = join(ROOT, '.venv/bin/python');
const SERVER = 'py';

/** A model's call of `tool` in Hermes' format, as the tools template's model writes it. */
const call = (tool, args) => `<tool_call>\n${JSON.stringify({ name: tool, arguments: args })}\n</tool_call>`;

/** The scripted engine's answers in turn (`||` between answers, `|` between tokens). */
const script = (...answers) => answers.map((tokens) => tokens.join('|')).join('||');

/** A folder holding only a copy of the test model under a chat template that knows tools. */
async function toolsModels(t) {
  const { model } = testEnvironment();
  const dir = await tempDataDir(t);
  const out = join(dir, basename(model).replace(/\.gguf$/i, '-tools.gguf'));
  const made = spawnSync(PYTHON, [join(ROOT, 'tests/tools_model.py'), model, out], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(made.status, 0, `tests/tools_model.py failed: ${made.stderr}`);
  return dir;
}

/** Settings → Tools → Add a server: our Python test server, run over stdio. */
async function addServerInSettings(page) {
  await page.locator(sel('nav-settings')).click();
  const section = page.locator(sel('mcp-section'));
  await section.waitFor();
  await section.locator(sel('mcp-empty')).waitFor();
  await section.locator(sel('mcp-add')).click();
  const form = section.locator(sel('mcp-form'));
  await form.waitFor();
  assert.equal(await form.locator(sel('mcp-kind-stdio')).isChecked(), true, 'a command is the default kind');
  assert.match(await form.locator(sel('mcp-command-warning')).innerText(), /runs on this computer with your user's rights/);
  await form.locator(sel('mcp-name')).fill(SERVER);
  await form.locator(sel('mcp-command')).fill(PYTHON);
  await form.locator(sel('mcp-args')).fill(join(ROOT, 'tests/mcp/py_server.py'));
  await form.locator(sel('mcp-save')).click();
  const row = section.locator(`${sel('mcp-server')}[data-name="${SERVER}"]`);
  await row.waitFor();
  assert.equal(await section.locator(sel('mcp-form')).count(), 0, 'the form closes once the server is added');
  assert.equal(await row.locator(sel('mcp-enabled')).isChecked(), true);
  // Its tools, listed on request (which starts it): echo is one, switched on.
  await row.locator(sel('mcp-tools-toggle')).click();
  const echo = row.locator(`${sel('mcp-tool')}[data-tool="echo"]`);
  await echo.waitFor({ timeout: 30_000 });
  assert.equal(await echo.locator(sel('mcp-tool-enabled')).isChecked(), true);
  // Asking for them started it: the row says so (as the node does), not "Stopped".
  await page
    .waitForFunction((s) => document.querySelector(s)?.getAttribute('data-state') === 'running', `${sel('mcp-server')}[data-name="${SERVER}"]`, {
      timeout: 10_000,
    })
    .catch(async (e) => {
      throw new Error(`${e.message}\nthe row says: ${await row.locator(sel('mcp-status')).textContent()}`);
    });
  assert.match(await row.locator(sel('mcp-status')).textContent(), /^Running, \d+ tools$/);
  await screenshot(page, '22-mcp-settings');
}

/** The card of the (only) call in the answer at `index` of the thread. */
const cardOf = (page, index) => page.locator(sel('answer')).nth(index).locator(sel('tool-call'));

/** Waits until the card has `state` (data-state), with a clear message when it does not. */
async function waitForCardState(page, index, state, timeout = 30_000) {
  await page
    .waitForFunction(
      ({ index, state }) =>
        document.querySelectorAll('[data-testid="answer"]')[index]?.querySelector('[data-testid="tool-call"]')?.getAttribute('data-state') ===
        state,
      { index, state },
      { timeout, polling: 50 },
    )
    .catch(async (e) => {
      const seen = await cardOf(page, index)
        .first()
        .evaluate((c) => `${c.getAttribute('data-state')}: ${c.textContent}`)
        .catch(() => 'no card');
      throw new Error(`${e.message}\nthe card of answer ${index}: ${seen}`);
    });
}

/** Asks, and checks the card the answer's call shows while it waits for consent. */
async function askAndSeeTheCard(page, question, message) {
  await sendMessage(page, question);
  await waitForCardState(page, 0, 'pending');
  const card = cardOf(page, 0);
  assert.equal(await card.count(), 1, 'one call, one card');
  assert.equal(await card.getAttribute('aria-label'), `Tool call ${SERVER} echo`);
  assert.equal(await card.locator('.tool-call-server').innerText(), SERVER);
  assert.equal(await card.locator('.tool-call-tool').innerText(), 'echo');
  assert.equal(await card.locator(sel('tool-call-state')).textContent(), 'Waits for you');
  // The arguments, shown as readable (pretty-printed) JSON, never hidden.
  const args = card.locator(sel('tool-call-args'));
  assert.equal(await args.isVisible(), true);
  assert.equal(await args.innerText(), JSON.stringify({ message }, null, 2));
  for (const [id, label] of [
    ['tool-allow-once', 'Allow once'],
    ['tool-allow-chat', 'Allow for this chat'],
    ['tool-allow-always', 'Always allow this tool'],
    ['tool-deny', 'Deny'],
  ]) {
    const button = card.locator(sel(id));
    assert.equal(await button.innerText(), label);
    assert.equal(await button.isEnabled(), true, `${label} is enabled while the call waits`);
  }
  assert.equal(await card.locator(sel('tool-outcome')).count(), 0, 'nothing ran before consent');
  return card;
}

test('add a server in Settings, allow a call, see its result, the answer, and both after a reload', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t, {
    modelsDir: await toolsModels(t),
    env: {
      HEARTH_SCRIPTED_ANSWER: script([call(`${SERVER}__echo`, { message: 'hi' })], ['The', ' tool', ' said', ' hi.']),
    },
  });
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);
  await addServerInSettings(page);

  await page.locator(sel('nav-chat')).click();
  await page.locator(sel('new-chat')).click();
  const card = await askAndSeeTheCard(page, 'Say hi through the tool', 'hi');
  const id = await conversationId(page);
  const waiting = await apiGet(node, `/api/conversations/${id}`);
  assert.equal(waiting.messages[1].tool_calls[0].state, 'pending', 'the node keeps the call waiting');
  await screenshot(page, '22-mcp-pending');

  await card.locator(sel('tool-allow-once')).click();
  await waitForCardState(page, 0, 'done');
  assert.equal(await card.locator(sel('tool-call-state')).textContent(), 'Done');
  assert.equal(await card.locator('.tool-consent').textContent(), 'allowed once');
  assert.equal(await card.locator(sel('tool-allow-once')).count(), 0, 'no buttons once decided');
  // The card of a finished call folds; its result shows when opened.
  if ((await card.locator(sel('tool-call-toggle')).getAttribute('aria-expanded')) === 'false') {
    await card.locator(sel('tool-call-toggle')).click();
  }
  assert.equal(await card.locator(sel('tool-outcome')).getAttribute('data-is-error'), 'false');
  assert.equal(await card.locator(sel('tool-part-text')).innerText(), 'Echo: hi');
  const final = await waitForAnswer(page, { statuses: ['complete'], minChars: 1 });
  assert.equal(final.text.trim(), 'The tool said hi.');
  assert.equal(final.count, 2, 'the call and the answer that read its result');
  await screenshot(page, '22-mcp-allowed');

  // The node kept the whole trace.
  const stored = await apiGet(node, `/api/conversations/${id}`);
  assert.deepEqual(
    stored.messages.map((m) => m.role),
    ['user', 'assistant', 'assistant'],
  );
  const [kept] = stored.messages[1].tool_calls;
  assert.deepEqual([kept.state, kept.consent, kept.arguments], ['done', 'once', { message: 'hi' }]);
  assert.equal(kept.outcome.parts[0].text, 'Echo: hi');

  // After a reload: the card (done, with its result) and the answer.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await waitForCardState(page, 0, 'done');
  const again = cardOf(page, 0);
  assert.equal(await again.locator('.tool-call-server').innerText(), SERVER);
  assert.equal(await again.locator('.tool-call-tool').innerText(), 'echo');
  if ((await again.locator(sel('tool-call-toggle')).getAttribute('aria-expanded')) === 'false') {
    await again.locator(sel('tool-call-toggle')).click();
  }
  assert.equal(await again.locator(sel('tool-call-args')).innerText(), JSON.stringify({ message: 'hi' }, null, 2));
  assert.equal(await again.locator(sel('tool-part-text')).innerText(), 'Echo: hi');
  const reloaded = await waitForAnswer(page, { statuses: ['complete'], minChars: 1 });
  assert.equal(reloaded.text.trim(), 'The tool said hi.');
  assert.equal(reloaded.count, 2);
  await screenshot(page, '22-mcp-reloaded');
  assert.deepEqual(problems, []);
});

test('deny a call with a reason: the card says so, the model is told, the answer follows', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t, {
    modelsDir: await toolsModels(t),
    env: {
      HEARTH_SCRIPTED_ANSWER: script([call(`${SERVER}__echo`, { message: 'secret' })], ['Denied,', ' fine.']),
    },
  });
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);
  await addServerInSettings(page);

  await page.locator(sel('nav-chat')).click();
  await page.locator(sel('new-chat')).click();
  const card = await askAndSeeTheCard(page, 'Echo my secret', 'secret');
  await card.locator(sel('tool-deny')).click();
  const reason = card.locator(sel('tool-deny-reason'));
  await reason.waitFor();
  await reason.fill('not now');
  await card.locator(sel('tool-deny-confirm')).click();
  await waitForCardState(page, 0, 'denied');
  assert.equal(await card.locator(sel('tool-call-state')).textContent(), 'Denied');
  if ((await card.locator(sel('tool-call-toggle')).getAttribute('aria-expanded')) === 'false') {
    await card.locator(sel('tool-call-toggle')).click();
  }
  assert.equal(await card.locator(sel('tool-call-reason')).innerText(), 'Denied: not now');
  assert.equal(await card.locator(sel('tool-outcome')).count(), 0, 'a denied call never runs');
  const final = await waitForAnswer(page, { statuses: ['complete'], minChars: 1 });
  assert.equal(final.text.trim(), 'Denied, fine.');
  assert.equal(final.count, 2);
  await screenshot(page, '22-mcp-denied');

  // The reason is kept with the call: what the model was told as the tool's error.
  const id = await conversationId(page);
  const stored = await apiGet(node, `/api/conversations/${id}`);
  const [kept] = stored.messages[1].tool_calls;
  assert.deepEqual([kept.state, kept.reason, kept.outcome], ['denied', 'not now', null]);
  assert.equal(stored.messages[2].content, 'Denied, fine.');

  await page.reload({ waitUntil: 'domcontentloaded' });
  await waitForCardState(page, 0, 'denied');
  const again = cardOf(page, 0);
  if ((await again.locator(sel('tool-call-toggle')).getAttribute('aria-expanded')) === 'false') {
    await again.locator(sel('tool-call-toggle')).click();
  }
  assert.equal(await again.locator(sel('tool-call-reason')).innerText(), 'Denied: not now');
  assert.equal((await waitForAnswer(page, { statuses: ['complete'], minChars: 1 })).text.trim(), 'Denied, fine.');
  assert.deepEqual(problems, []);
});
