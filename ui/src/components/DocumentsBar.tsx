/**
 * The conversation's documents above the composer: each one kept (its name, pages or size,
 * and a button that takes it out), each one the node is still reading (a spinner: a large
 * PDF takes a while, and the chat stays usable), and why a file was refused.
 */
import type { DocumentInfo } from '../api/types';
import type { Reading } from '../chat/useDocuments';
import { formatBytes } from '../format';
import { CloseIcon } from './icons';
import './Documents.css';

export interface DocumentsBarProps {
  documents: DocumentInfo[];
  reading: Reading[];
  refusal: string | null;
  onRemove: (documentId: string) => void;
  onDismiss: () => void;
}

export function DocumentsBar({ documents, reading, refusal, onRemove, onDismiss }: DocumentsBarProps) {
  if (documents.length === 0 && reading.length === 0 && !refusal) return null;
  return (
    <div className="documents-bar" data-testid="documents">
      <ul className="documents-list" aria-label="Documents of this conversation">
        {documents.map((d) => (
          <li key={d.id} className="document-chip" data-testid="document" data-name={d.name} title={`${d.passages} passages`}>
            <span className="document-kind">{d.kind.toUpperCase()}</span>
            <span className="document-name">{d.name}</span>
            <span className="document-size">{d.pages !== null ? `${d.pages} p.` : formatBytes(d.bytes)}</span>
            <button
              type="button"
              className="document-remove"
              data-testid="document-remove"
              aria-label={`Take ${d.name} out of this conversation`}
              title="Take out"
              onClick={() => onRemove(d.id)}
            >
              <CloseIcon />
            </button>
          </li>
        ))}
        {reading.map((r) => (
          <li key={r.key} className="document-chip reading" data-testid="document-reading" aria-busy="true">
            <span className="spinner" aria-hidden="true" />
            <span className="document-name">Reading {r.name}…</span>
            <span className="document-size">{formatBytes(r.size)}</span>
          </li>
        ))}
      </ul>
      {refusal && (
        <div className="documents-refused" role="alert" data-testid="document-refused">
          <span>{refusal}</span>
          <button type="button" className="icon-btn" aria-label="Dismiss" onClick={onDismiss}>
            <CloseIcon />
          </button>
        </div>
      )}
    </div>
  );
}
