/**
 * Documents the user attaches to a conversation (picked, pasted or dropped beside images): which
 * files go to the node as documents, with its limits checked here first, and the words the chat
 * shows for what an answer was given of them (its sources, and the path taken: the documents
 * whole, or passages retrieved for the question).
 */
import type { Source, Sources } from '../api/types';
import { formatBytes } from '../format';
import type { FileFacts } from './attachments';

/** The node's limits (`documents_api`): bytes a file, documents a conversation. */
export const MAX_DOCUMENT_BYTES = 50 * 1024 * 1024;
export const MAX_DOCUMENTS = 20;

/** Names the node reads as documents: PDF, DOCX, and text of every kind. */
const DOCUMENT_NAME =
  /\.(pdf|docx|txt|text|md|markdown|csv|tsv|json|jsonl|html?|xml|ya?ml|toml|ini|log|rst|tex|rs|py|js|mjs|ts|tsx|jsx|c|h|cc|cpp|hpp|java|kt|go|rb|php|swift|cs|sh|sql|css|scss|lua|r|m|pl)$/i;
const DOCUMENT_TYPES = [
  'application/pdf',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  'application/json',
  'application/xml',
];

/** The file picker's `accept` for documents. */
export const DOCUMENT_ACCEPT = ['.pdf', '.docx', '.txt', '.md', '.csv', '.json', '.html', 'text/*', ...DOCUMENT_TYPES].join(',');

/** Whether the node would read this file as a document. */
export function isDocument(f: FileFacts): boolean {
  return DOCUMENT_NAME.test(f.name) || f.type.startsWith('text/') || DOCUMENT_TYPES.includes(f.type);
}

/** Which of `files` may go to a conversation holding `already` documents, and why each other one may not. */
export function screenDocuments<F extends FileFacts>(files: F[], already: number): { taken: F[]; refused: string[] } {
  const taken: F[] = [];
  const refused: string[] = [];
  for (const f of files) {
    if (f.size > MAX_DOCUMENT_BYTES) {
      refused.push(`${f.name} is ${formatBytes(f.size)}: a document may have ${formatBytes(MAX_DOCUMENT_BYTES)} at most.`);
    } else if (f.size === 0) {
      refused.push(`${f.name} is empty.`);
    } else if (already + taken.length >= MAX_DOCUMENTS) {
      refused.push(`${f.name}: a conversation keeps ${MAX_DOCUMENTS} documents at most.`);
    } else {
      taken.push(f);
    }
  }
  return { taken, refused };
}

/** Where a source stands: its document, page and heading. */
export function sourceLabel(s: Source): string {
  const parts = [s.document];
  if (s.page !== null) parts.push(`page ${s.page}`);
  if (s.heading) parts.push(s.heading);
  if (s.whole) parts.push('whole');
  return parts.join(' · ');
}

const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;

/** What an answer was given, in a line. */
export function pathLabel(sources: Sources): string {
  if (sources.path === 'whole') return `Read whole: ${plural(sources.items.length, 'document')}`;
  if (sources.items.length === 0) return `No passage of the ${plural(sources.documents, 'document')} fit beside this conversation`;
  return `${plural(sources.items.length, 'passage')} retrieved from ${plural(sources.documents, 'document')}`;
}
