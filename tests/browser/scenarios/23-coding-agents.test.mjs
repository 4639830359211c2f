// Scenario 23: Settings → Coding agents (issue 51). The node runs the default test model with a
// 2,048-token context, on loopback only (not shared).
//
// A: the section lists Claude Code, Codex, Qwen Code, opencode and Continue; for each, the text on
//    the page is exactly what `hearth-node connect <agent> --server <this node>` prints (the real
//    command, asking the same node for its model), and what GET /api/agents answers the page's own
//    origin. Every agent whose own prompt is larger than the model's context (all but Continue's
//    ~1,300 tokens) shows a warning naming the model, its 2,048 tokens and the agent's prompt
//    size; Continue shows none. A node that is not shared offers no "Make a key". Copy puts the
//    text on the clipboard.
// B: "Make a key" shows only while the node is shared on the LAN, which only `--lan` (listening on
//    every interface) does: no flag shares a node that listens on 127.0.0.1 alone. So the node
//    stays on loopback, and the page's GET /api/agents is answered with what a shared node
//    answers: the node's own answer with `shared` set and each text as `hearth-node connect
//    --key YOUR_HEARTH_KEY` prints it (the placeholder a shared node puts where the key goes).
//    Everything else is real: one click makes a `use` key on the node (POST /api/keys), the key is
//    listed under API keys, and the text holds it where the placeholder was, as `hearth-node
//    connect --key <that key>` prints it, for every agent picked; hiding it puts the placeholder
//    back.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { openBrowser } from '../lib/browser.mjs';
import { apiGet, startNode, testEnvironment } from '../lib/node.mjs';
import { openApp, screenshot, sel } from '../lib/ui.mjs';

/** The model's context: smaller than every agent's own prompt but Continue's. */
const CTX = 2048;

/** The agents in the order shown, with their own prompt sizes (crates/server/src/connect.rs). */
const AGENTS = [
  { id: 'claude', name: 'Claude Code', prompt: 20_000 },
  { id: 'codex', name: 'Codex', prompt: 8_300 },
  { id: 'qwen', name: 'Qwen Code', prompt: 14_300 },
  { id: 'opencode', name: 'opencode', prompt: 10_000 },
  { id: 'continue', name: 'Continue', prompt: 1_300 },
];

/** What a shared node puts in the texts where the key goes (agents_api.rs). */
const PLACEHOLDER = 'YOUR_HEARTH_KEY';

const n = (v) => v.toLocaleString('en-US');

/** What `hearth-node connect <agent>` prints for `node` (the model: the first the node serves). */
function connect(node, agent, ...extra) {
  const { bin } = testEnvironment();
  const env = { ...process.env };
  delete env.HEARTH_API_KEY;
  delete env.HEARTH_SERVER;
  const run = spawnSync(bin, ['connect', agent, '--server', node.url, ...extra], { encoding: 'utf8', timeout: 20_000, env });
  assert.equal(run.status, 0, `hearth-node connect ${agent} failed: ${run.stderr}`);
  return run.stdout;
}

/** Opens Settings and waits for the Coding agents section to have the node's answer. */
async function openAgents(page) {
  await page.locator(sel('nav-settings')).click();
  await page.locator(sel('settings-page')).waitFor();
  const section = page.locator(sel('agents-section'));
  await section.waitFor();
  await section.locator(sel('agent-picker')).waitFor().catch(async (e) => {
    throw new Error(`${e.message}\nthe section says: ${await section.innerText().catch(() => '?')}`);
  });
  assert.equal(await section.locator(sel('agents-error')).count(), 0);
  return section;
}

/** Picks `id` in the section's list and waits until the text shown is `expected`. */
async function pick(page, section, id, expected) {
  await section.locator(sel('agent-picker')).selectOption(id);
  await page
    .waitForFunction(({ s, expected }) => document.querySelector(s)?.textContent === expected, { s: sel('agent-text'), expected }, { timeout: 10_000 })
    .catch(async (e) => {
      const shown = await section.locator(sel('agent-text')).textContent().catch(() => null);
      throw new Error(`${e.message}\n${id}: the page shows\n${shown}\nhearth-node connect prints\n${expected}`);
    });
  assert.equal(await section.locator('.code-head span').innerText(), AGENTS.find((a) => a.id === id).name);
}

test('each coding agent shows what hearth-node connect prints, and a warning where the context is too small', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t, { ctx: CTX });
  const status = await apiGet(node, '/api/status');
  assert.equal(status.model.context, CTX, 'the model has the context it was started with');
  assert.equal(status.exposed, false, 'the node listens on loopback only');
  const { context, page, problems } = await openBrowser(t);
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: node.url });
  await openApp(page, node);
  const section = await openAgents(page);

  assert.match(await section.locator('h2').innerText(), /^Coding agents$/);
  assert.match(await section.innerText(), /hearth-node connect/);
  const options = await section.locator(`${sel('agent-picker')} option`).evaluateAll((os) => os.map((o) => [o.value, o.textContent]));
  assert.deepEqual(
    options,
    AGENTS.map((a) => [a.id, a.name]),
  );
  assert.equal(await section.locator(sel('agent-picker')).inputValue(), 'claude', 'Claude Code is shown first');
  assert.equal(await section.locator(sel('agent-model')).innerText(), `Model: ${node.modelId} (${n(CTX)} tokens of context)`);
  assert.equal(await section.locator(sel('agent-make-key')).count(), 0, 'a node not shared needs no key');

  // What the node answers the page's own origin (as the page asked it).
  const served = await page.evaluate(async () => {
    const res = await fetch('/api/agents');
    return { status: res.status, body: await res.json() };
  });
  assert.equal(served.status, 200, JSON.stringify(served.body));
  assert.equal(served.body.url, node.url);
  assert.equal(served.body.model, node.modelId);
  assert.equal(served.body.model_context, CTX);
  assert.equal(served.body.shared, false);
  assert.equal(served.body.key_placeholder, null);
  assert.deepEqual(
    served.body.agents.map((a) => a.id),
    AGENTS.map((a) => a.id),
  );

  for (const agent of AGENTS) {
    const printed = connect(node, agent.id);
    // The command found the same node and model, and says any key passes it.
    assert.ok(printed.includes(node.url), `${agent.id}: ${printed}`);
    assert.ok(printed.includes(node.modelId), `${agent.id}: ${printed}`);
    assert.ok(!printed.includes(PLACEHOLDER), `${agent.id}: ${printed}`);
    const entry = served.body.agents.find((a) => a.id === agent.id);
    assert.equal(entry.text, printed, `${agent.id}: GET /api/agents and hearth-node connect differ`);
    assert.equal(entry.prompt_tokens, agent.prompt, agent.id);
    assert.equal(entry.too_small, agent.prompt > CTX, agent.id);

    await pick(page, section, agent.id, printed);
    const warning = section.locator(sel('agent-too-small'));
    if (agent.prompt > CTX) {
      assert.equal(await warning.isVisible(), true, `${agent.name}: its ~${agent.prompt}-token prompt does not fit ${CTX} tokens`);
      const said = await warning.innerText();
      assert.equal(
        said,
        `${node.modelId} has ${n(CTX)} tokens of context; ${agent.name}'s own prompt is about ${n(agent.prompt)}: pick a model with a larger context.`,
      );
    } else {
      assert.equal(await warning.count(), 0, `${agent.name}: its prompt fits, no warning (${await warning.allInnerTexts()})`);
    }
    if (agent.id === 'qwen') {
      await section.scrollIntoViewIfNeeded();
      await screenshot(page, '23-coding-agents-warning');
    }
  }

  // As the page lays it out, the text keeps its lines (what a user reads and selects).
  await t.test('the text shown keeps its lines', async () => {
    const shown = await section.locator(sel('agent-text')).evaluate((c) => ({ rendered: c.innerText, text: c.textContent }));
    const lines = (s) => s.split('\n').filter((l) => l !== '');
    assert.deepEqual(lines(shown.rendered), lines(shown.text));
  });

  // Copy puts the text shown (Continue's, the last picked) on the clipboard.
  await section.locator(sel('agent-copy')).click();
  await page.waitForFunction((s) => document.querySelector(s)?.textContent.includes('Copied'), sel('agent-copy'), { timeout: 5_000 });
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), connect(node, 'continue'));
  await screenshot(page, '23-coding-agents');
  assert.deepEqual(problems, []);
});

test('shared: one click makes a use key and puts it in every agent’s text', { timeout: 180_000 }, async (t) => {
  const node = await startNode(t, { ctx: CTX });
  const withPlaceholder = Object.fromEntries(AGENTS.map((a) => [a.id, connect(node, a.id, '--key', PLACEHOLDER)]));
  const { page, problems } = await openBrowser(t);
  // The node's own answer, as a shared node gives it (see the top of this file).
  let asked = 0;
  await page.route(
    (url) => url.pathname === '/api/agents',
    async (route) => {
      asked += 1;
      const res = await route.fetch();
      const body = await res.json();
      body.shared = true;
      body.key_placeholder = PLACEHOLDER;
      for (const a of body.agents) a.text = withPlaceholder[a.id];
      await route.fulfill({ response: res, json: body });
    },
  );
  await openApp(page, node);
  const section = await openAgents(page);
  assert.equal(asked, 1, 'the section asked the node once');
  await pick(page, section, 'claude', withPlaceholder.claude);
  assert.match(await section.innerText(), new RegExp(`The node is shared: the agent needs a key\\. ${PLACEHOLDER} stands where it goes\\.`));
  assert.deepEqual((await apiGet(node, '/api/keys')).keys, []);

  const button = section.locator(sel('agent-make-key'));
  assert.equal(await button.innerText(), 'Make a key');
  await button.click();
  const made = section.locator(sel('agent-key-made'));
  await made.waitFor();
  assert.equal(await button.count(), 0, 'the button goes once the key is made');
  assert.equal(await section.locator(sel('agent-key-error')).count(), 0);
  assert.match(await made.innerText(), /The key “Claude Code \(coding agent\)” is in the text below: copy it now, it will not be shown again\./);

  // The node has it: a use key under the agent's name, whose secret is the one in the text.
  const keyId = await made.getAttribute('data-key-id');
  const keys = (await apiGet(node, '/api/keys')).keys;
  assert.equal(keys.length, 1, JSON.stringify(keys));
  const [key] = keys;
  assert.deepEqual([key.id, key.name, key.scope, key.revoked], [keyId, 'Claude Code (coding agent)', 'use', false]);
  const text = await section.locator(sel('agent-text')).textContent();
  const secret = /^export ANTHROPIC_API_KEY=(\S+)$/m.exec(text)?.[1];
  assert.match(secret ?? '', /^hearth_\S+$/, text);
  assert.ok(secret.startsWith(key.prefix), `the secret ${secret.slice(0, 12)}… does not start with the key's prefix ${key.prefix}`);
  assert.equal(text, connect(node, 'claude', '--key', secret));
  // The API keys list above shows it (the section told the page a key was made).
  const row = page.locator(`${sel('key-row')}[data-key-id="${keyId}"]`);
  await row.waitFor();
  assert.match(await row.innerText(), /Claude Code \(coding agent\)/);
  await screenshot(page, '23-coding-agents-key');

  // Every agent's text holds the same key, as the command prints it with --key.
  for (const agent of AGENTS.slice(1)) await pick(page, section, agent.id, connect(node, agent.id, '--key', secret));

  // Hidden: the key is gone from the page, the placeholder and the button are back.
  await section.locator(sel('agent-key-dismiss')).click();
  await page.waitForFunction((s) => document.querySelector(s) === null, sel('agent-key-made'), { timeout: 5_000 });
  assert.equal(await section.locator(sel('agent-text')).textContent(), withPlaceholder.continue);
  assert.ok(!(await page.content()).includes(secret), 'the secret is still on the page once hidden');
  assert.equal(await button.count(), 1);
  assert.equal((await apiGet(node, '/api/keys')).keys.length, 1, 'hiding the key does not revoke or add one');
  assert.deepEqual(problems, []);
});
