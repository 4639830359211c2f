// @vitest-environment jsdom
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import type { DocumentInfo, Sources } from '../api/types';
import { DocumentsBar } from './DocumentsBar';
import { SourcesList } from './SourcesList';

function mount(element: ReturnType<typeof createElement>): HTMLElement {
  const el = document.createElement('div');
  el.innerHTML = renderToStaticMarkup(element);
  return el;
}

const sources: Sources = {
  path: 'passages',
  documents: 1,
  items: [
    { n: 1, document_id: 'd_1', document: 'manual.pdf', page: 40, heading: null, text: '<img src=x onerror=alert(1)>', whole: false },
    { n: 2, document_id: 'd_1', document: 'manual.pdf', page: 41, heading: '<img src=y onerror=alert(2)>', text: 'two', whole: false },
  ],
};

describe('sources and documents', () => {
  it('lists an answer’s sources by number, document and page, with the path taken', () => {
    const el = mount(createElement(SourcesList, { sources }));
    expect(el.querySelector('[data-testid="sources"]')?.getAttribute('data-path')).toBe('passages');
    expect(el.querySelector('[data-testid="sources-path"]')?.textContent).toBe('2 passages retrieved from 1 document');
    const items = [...el.querySelectorAll('[data-testid="source"]')].map((b) => b.textContent);
    // A heading (text from the document) is shown as text, never as markup.
    expect(items).toEqual(['[1] manual.pdf · page 40', '[2] manual.pdf · page 41 · <img src=y onerror=alert(2)>']);
    expect(el.querySelector('img')).toBeNull();
    // Nothing is open until clicked.
    expect(el.querySelector('[data-testid="source-text"]')).toBeNull();
  });

  it('shows documents kept, files being read and a refusal, and nothing when there are none', () => {
    const doc: DocumentInfo = {
      id: 'd_1',
      name: 'manual.pdf',
      kind: 'pdf',
      digest: 'x',
      bytes: 2048,
      pages: 300,
      passages: 301,
      created_at: 0,
    };
    const none = mount(createElement(DocumentsBar, { documents: [], reading: [], refusal: null, onRemove: () => {}, onDismiss: () => {} }));
    expect(none.innerHTML).toBe('');
    const el = mount(
      createElement(DocumentsBar, {
        documents: [doc, { ...doc, id: 'd_2', name: 'notes.md', kind: 'markdown', pages: null }],
        reading: [{ key: 'k', of: 'c', name: 'big.pdf', size: 4096 }],
        refusal: 'scan.pdf: no text',
        onRemove: () => {},
        onDismiss: () => {},
      }),
    );
    const chips = [...el.querySelectorAll('[data-testid="document"]')];
    expect(chips.map((c) => c.getAttribute('data-name'))).toEqual(['manual.pdf', 'notes.md']);
    expect(chips[0].textContent).toContain('300 p.');
    expect(chips[1].textContent).toContain('2.0 KB');
    expect(el.querySelector('[data-testid="document-reading"]')?.textContent).toContain('Reading big.pdf…');
    expect(el.querySelector('[data-testid="document-refused"]')?.textContent).toBe('scan.pdf: no text');
  });
});
