// @vitest-environment jsdom
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import type { McpImportResult } from '../api/mcpTypes';
import { McpImportResultView } from './McpImport';

function mount(result: McpImportResult): HTMLElement {
  const el = document.createElement('div');
  el.innerHTML = renderToStaticMarkup(createElement(McpImportResultView, { result }));
  return el;
}

describe('the import result', () => {
  it('names the servers added and each skipped one with its reason', () => {
    const el = mount({
      added: ['files', 'everything'],
      skipped: [
        { name: 'old-sse', reason: 'it uses the SSE transport (MCP 2024-11-05)' },
        { name: 'files2', reason: 'a server named "files2" already exists' },
      ],
    });
    expect(el.querySelector('[data-testid="mcp-import-added"]')?.textContent).toMatch(/^Added 2 servers: files, everything\./);
    const skipped = [...el.querySelectorAll('[data-testid="mcp-import-skipped"] li')].map((li) => [
      li.getAttribute('data-name'),
      li.textContent,
    ]);
    expect(skipped).toEqual([
      ['old-sse', 'old-sse: it uses the SSE transport (MCP 2024-11-05)'],
      ['files2', 'files2: a server named "files2" already exists'],
    ]);
  });

  it('says when nothing was added, and shows a reason as text', () => {
    const el = mount({ added: [], skipped: [{ name: 'x', reason: '<b>bad</b>' }] });
    expect(el.querySelector('[data-testid="mcp-import-added"]')).toBeNull();
    expect(el.textContent).toContain('Skipped one server');
    expect(el.querySelector('b')).toBeNull();
    expect(el.textContent).toContain('<b>bad</b>');
    expect(mount({ added: [], skipped: [] }).textContent).toContain('names no servers');
  });
});
