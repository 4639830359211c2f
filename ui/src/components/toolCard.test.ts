// @vitest-environment jsdom
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import type { ToolCall, ToolOutcome } from '../api/mcpTypes';
import { formatArguments, imageSrc, linkHref } from '../chat/toolView';
import { ToolCallCard } from './ToolCallCard';
import { ToolOutcomeView } from './ToolOutcome';

/** Renders as the page would and parses the markup back, to look at the elements it made. */
function mount(element: ReturnType<typeof createElement>): HTMLElement {
  const el = document.createElement('div');
  el.innerHTML = renderToStaticMarkup(element);
  return el;
}

const outcome = (parts: ToolOutcome['parts'], extra: Partial<ToolOutcome> = {}): ToolOutcome => ({
  parts,
  is_error: false,
  cut_bytes: 0,
  ...extra,
});

const call = (overrides: Partial<ToolCall> = {}): ToolCall => ({
  id: 'call_1',
  name: 'files__read_file',
  server: 'files',
  tool: 'read_file',
  arguments: { path: '/home/me/<b>notes</b>.md', lines: 10 },
  state: 'pending',
  consent: null,
  reason: null,
  outcome: null,
  error: null,
  ...overrides,
});

describe('a tool result', () => {
  it('shows a text part as text, never as HTML', () => {
    const attack = '<img src=x onerror=alert(1)><script>alert(2)</script>**bold**';
    const el = mount(createElement(ToolOutcomeView, { outcome: outcome([{ type: 'text', text: attack }]) }));
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('script')).toBeNull();
    expect(el.querySelector('strong')).toBeNull();
    expect(el.querySelector('[data-testid="tool-part-text"]')?.textContent).toBe(attack);
  });

  it('shows an image part as a data URL picture, and only an image type', () => {
    const el = mount(
      createElement(ToolOutcomeView, {
        outcome: outcome([
          { type: 'image', mime_type: 'image/png', data: 'iVBORw0KGgo=' },
          { type: 'image', mime_type: 'text/html', data: 'PHNjcmlwdD4=' },
        ]),
      }),
    );
    const imgs = el.querySelectorAll('img');
    expect(imgs).toHaveLength(1);
    expect(imgs[0].getAttribute('src')).toBe('data:image/png;base64,iVBORw0KGgo=');
    expect(imageSrc('image/png', 'abc"><script>')).toBeNull();
  });

  it('links http(s) resources with a plain label, and shows other schemes as text', () => {
    const el = mount(
      createElement(ToolOutcomeView, {
        outcome: outcome([
          { type: 'link', uri: 'https://example.com/a?b=1', name: '<i>Readme</i>' },
          { type: 'link', uri: 'javascript:alert(1)', name: 'click me' },
          { type: 'link', uri: 'file:///home/me/notes/a.md', name: 'a.md' },
        ]),
      }),
    );
    const links = el.querySelectorAll('a');
    expect(links).toHaveLength(1);
    expect(links[0].getAttribute('href')).toBe('https://example.com/a?b=1');
    expect(links[0].getAttribute('rel')).toContain('noopener');
    expect(links[0].textContent).toBe('<i>Readme</i>');
    expect(el.querySelector('i')).toBeNull();
    expect(el.textContent).toContain('click me');
    expect(linkHref('file:///x')).toBeNull();
  });

  it('marks an error result and says when the result was cut', () => {
    const plain = mount(createElement(ToolOutcomeView, { outcome: outcome([{ type: 'text', text: 'ok' }]) }));
    expect(plain.querySelector('[data-testid="tool-outcome-error"]')).toBeNull();
    expect(plain.querySelector('[data-testid="tool-outcome-cut"]')).toBeNull();
    const bad = mount(
      createElement(ToolOutcomeView, {
        outcome: outcome([{ type: 'text', text: 'no such file' }], { is_error: true, cut_bytes: 9 * 1024 * 1024 }),
      }),
    );
    expect(bad.querySelector('[data-testid="tool-outcome"]')?.getAttribute('data-is-error')).toBe('true');
    expect(bad.querySelector('[data-testid="tool-outcome-error"]')).not.toBeNull();
    expect(bad.querySelector('[data-testid="tool-outcome-cut"]')?.textContent).toMatch(/^9(\.0)? MB of this result/);
  });
});

describe('a tool call card', () => {
  const onDecide = () => undefined;

  it('shows the arguments of a call that waits, as JSON text, with the four choices', () => {
    const el = mount(createElement(ToolCallCard, { call: call(), disabled: false, onDecide }));
    const args = el.querySelector('[data-testid="tool-call-args"]');
    expect(args?.textContent).toBe(formatArguments(call().arguments));
    expect(args?.textContent).toContain('"path": "/home/me/<b>notes</b>.md"');
    expect(el.querySelector('b')).toBeNull();
    const buttons = [...el.querySelectorAll('button')].map((b) => b.textContent);
    expect(buttons).toEqual(expect.arrayContaining(['Allow once', 'Allow for this chat', 'Always allow this tool', 'Deny']));
    expect(el.textContent).toContain('files');
    expect(el.textContent).toContain('read_file');
  });

  it('a finished call shows no buttons and starts folded', () => {
    const done = call({ state: 'done', consent: 'chat', outcome: outcome([{ type: 'text', text: 'hi' }]) });
    const el = mount(createElement(ToolCallCard, { call: done, disabled: false, onDecide }));
    expect(el.querySelector('[data-testid="tool-allow-once"]')).toBeNull();
    expect(el.querySelector('[data-testid="tool-call-args"]')).toBeNull();
    expect(el.querySelector('[data-testid="tool-call-state"]')?.textContent).toBe('Done');
    expect(el.textContent).toContain('allowed for this chat');
  });

  it('pretty-prints arguments given as a JSON string, and keeps a broken one as it is', () => {
    expect(formatArguments('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(formatArguments('{"a":')).toBe('{"a":');
  });
});
