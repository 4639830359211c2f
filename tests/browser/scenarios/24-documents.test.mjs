// Scenario 24: documents in the chat. A 300-page PDF manual (written by reportlab through
// tests/fixtures/make_documents.py) is picked with the attach button before any conversation
// exists: one is made, the manual is read and shown above the composer
// with its pages. A question about page 40 gets an answer whose sources are the passages
// retrieved for it; clicking the source on page 40 shows that page's text. After a reload the
// sources and the document are still there. A scan dropped on the composer is refused in
// words. Deleting the conversation takes its documents with it.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openBrowser } from '../lib/browser.mjs';
import { startNode, tempDataDir } from '../lib/node.mjs';
import { conversationId, openApp, screenshot, sel, sendMessage, waitForAnswer } from '../lib/ui.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** Drops a file on the composer, as one dragged from the desktop is. */
async function drop(page, bytes, type, name) {
  await page.evaluate(
    ({ base64, type, name }) => {
      const data = new DataTransfer();
      data.items.add(new File([Uint8Array.from(atob(base64), (c) => c.charCodeAt(0))], name, { type }));
      const form = document.querySelector('form.composer');
      for (const kind of ['dragover', 'drop']) {
        form.dispatchEvent(new DragEvent(kind, { dataTransfer: data, bubbles: true, cancelable: true }));
      }
    },
    { base64: bytes.toString('base64'), type, name },
  );
}

test('a PDF attached to the chat answers about page 40 with the page as its source', { timeout: 240_000 }, async (t) => {
  const docs = await tempDataDir(t);
  const made = spawnSync(join(ROOT, '.venv/bin/python'), [join(ROOT, 'tests/fixtures/make_documents.py'), '--out', docs], {
    encoding: 'utf8',
  });
  assert.equal(made.status, 0, made.stderr);
  const node = await startNode(t);
  const { page, problems } = await openBrowser(t);
  await openApp(page, node);

  // Picked before any conversation exists: one is made for it.
  await page.locator(sel('attach-input')).setInputFiles(join(docs, 'manual.pdf'));
  const id = await conversationId(page);
  const chip = page.locator(`${sel('document')}[data-name="manual.pdf"]`);
  await chip.waitFor({ timeout: 60_000 });
  assert.match(await chip.textContent(), /300 p\./);
  await screenshot(page, '24-documents-attached');

  // Short answers: the scenario is about what the model is given, not what it writes.
  const patched = await fetch(`${node.url}/api/conversations/${id}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ settings: { max_tokens: 12, temperature: 0 } }),
  });
  assert.equal(patched.status, 200, await patched.text());

  await sendMessage(page, 'What is the code word of page 40?');
  await waitForAnswer(page, { statuses: ['complete'], timeout: 120_000 });
  const sources = page.locator(sel('sources')).last();
  await sources.waitFor({ timeout: 15_000 });
  assert.equal(await sources.getAttribute('data-path'), 'passages');
  assert.match(await sources.locator(sel('sources-path')).textContent(), /passages? retrieved from 1 document/);
  const pageForty = sources.locator(sel('source')).filter({ hasText: 'manual.pdf · page 40' });
  await pageForty.click();
  const passage = sources.locator(sel('source-text'));
  await passage.waitFor();
  assert.match(await passage.textContent(), /The code word of page 40 is amber-ember-40/);
  await screenshot(page, '24-documents-source');

  // A reload keeps the sources and the document.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.locator(sel('sources')).last().waitFor({ timeout: 15_000 });
  await page.locator(`${sel('document')}[data-name="manual.pdf"]`).waitFor({ timeout: 15_000 });
  const reloaded = page.locator(sel('sources')).last();
  await reloaded.locator(sel('source')).filter({ hasText: 'page 40' }).click();
  await reloaded.locator(sel('source-text')).filter({ hasText: 'amber-ember-40' }).waitFor();

  // A scan holds no text: refused in words, nothing kept.
  await drop(page, await readFile(join(docs, 'scan.pdf')), 'application/pdf', 'scan.pdf');
  const refused = page.locator(sel('document-refused'));
  await refused.waitFor({ timeout: 30_000 });
  assert.match(await refused.textContent(), /scan\.pdf: .*no text.*OCR/);
  assert.equal(await page.locator(sel('document')).count(), 1);
  await screenshot(page, '24-documents-refused');

  // Deleting the conversation takes its documents.
  const item = page.locator(`${sel('conversation-item')}[data-conversation-id="${id}"]`);
  await item.locator(sel('conversation-delete')).click();
  await item.locator(sel('delete-confirm')).click();
  await item.waitFor({ state: 'detached' });
  const gone = await fetch(`${node.url}/api/conversations/${id}/documents`);
  assert.equal(gone.status, 404);
  assert.deepEqual(problems, []);
});
