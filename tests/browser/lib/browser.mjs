// Debian's Chromium through playwright-core, headless, with a fresh profile per test (never a
// downloaded browser). Collects uncaught page errors and dialogs, which every test asserts are
// absent: a dialog would mean model output or a bug ran script.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Default wait for one UI step (element shown, text changed). */
export const STEP_TIMEOUT_MS = 15_000;

/**
 * A browser for test `t`, closed (and its profile removed) when the test ends.
 * Returns the context, its first page and the list of problems seen on any page.
 */
export async function openBrowser(t, { viewport = { width: 1280, height: 800 } } = {}) {
  const profile = await mkdtemp(join(tmpdir(), 'hearth-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport,
    timeout: 60_000,
  });
  const problems = [];
  const watch = (page) => {
    page.setDefaultTimeout(STEP_TIMEOUT_MS);
    page.on('pageerror', (e) => problems.push(`uncaught error: ${e.message}`));
    page.on('dialog', (d) => {
      problems.push(`unexpected dialog: ${d.type()} ${d.message()}`);
      void d.dismiss().catch(() => undefined);
    });
  };
  context.pages().forEach(watch);
  context.on('page', watch);
  const page = context.pages()[0] ?? (await context.newPage());
  t.after(async () => {
    await context.close().catch(() => undefined);
    await rm(profile, { recursive: true, force: true });
  });
  return { context, page, problems };
}
