import { describe, expect, it } from 'vitest';
import type { Source } from '../api/types';
import { isDocument, MAX_DOCUMENT_BYTES, MAX_DOCUMENTS, pathLabel, screenDocuments, sourceLabel } from './documents';

const file = (name: string, size = 10, type = '') => ({ name, size, type });

describe('documents', () => {
  it('takes PDFs, DOCX files and text of every kind, not pictures', () => {
    expect(isDocument(file('manual.PDF'))).toBe(true);
    expect(isDocument(file('notes.docx'))).toBe(true);
    expect(isDocument(file('main.rs'))).toBe(true);
    expect(isDocument(file('data', 10, 'text/csv'))).toBe(true);
    expect(isDocument(file('cat.png', 10, 'image/png'))).toBe(false);
    expect(isDocument(file('archive.zip', 10, 'application/zip'))).toBe(false);
  });

  it('refuses a file over the limit, an empty one, and one past the count, saying which', () => {
    const { taken, refused } = screenDocuments(
      [file('big.pdf', MAX_DOCUMENT_BYTES + 1), file('empty.txt', 0), file('a.md'), file('b.md')],
      MAX_DOCUMENTS - 1,
    );
    expect(taken.map((f) => f.name)).toEqual(['a.md']);
    expect(refused).toHaveLength(3);
    expect(refused[0]).toMatch(/^big\.pdf is .* at most\.$/);
    expect(refused[1]).toBe('empty.txt is empty.');
    expect(refused[2]).toBe(`b.md: a conversation keeps ${MAX_DOCUMENTS} documents at most.`);
  });

  it('labels a source by document, page and heading, and the path an answer took', () => {
    const s: Source = { n: 1, document_id: 'd', document: 'manual.pdf', page: 40, heading: null, text: 't', whole: false };
    expect(sourceLabel(s)).toBe('manual.pdf · page 40');
    expect(sourceLabel({ ...s, page: null, heading: 'Setup', whole: false })).toBe('manual.pdf · Setup');
    expect(pathLabel({ path: 'passages', documents: 1, items: [s, { ...s, n: 2 }] })).toBe('2 passages retrieved from 1 document');
    expect(pathLabel({ path: 'whole', documents: 2, items: [s, s] })).toBe('Read whole: 2 documents');
    expect(pathLabel({ path: 'passages', documents: 3, items: [] })).toBe('No passage of the 3 documents fit beside this conversation');
  });
});
