/**
 * What an answer was given of the conversation's documents: the path taken (the documents
 * whole, or passages retrieved for the question) and its numbered sources, as the model was
 * asked to cite them ([n]). A click on a source shows its passage, as plain text.
 */
import { useState } from 'react';
import type { Sources } from '../api/types';
import { pathLabel, sourceLabel } from '../chat/documents';
import './Documents.css';

export function SourcesList({ sources }: { sources: Sources }) {
  const [open, setOpen] = useState<number | null>(null);
  const shown = sources.items.find((s) => s.n === open) ?? null;
  return (
    <div className="sources" data-testid="sources" data-path={sources.path}>
      <div className="sources-path" data-testid="sources-path">
        {pathLabel(sources)}
      </div>
      {sources.items.length > 0 && (
        <ol className="sources-list">
          {sources.items.map((s) => (
            <li key={s.n}>
              <button
                type="button"
                className={`source${open === s.n ? ' open' : ''}`}
                data-testid="source"
                data-n={s.n}
                aria-expanded={open === s.n}
                onClick={() => setOpen((now) => (now === s.n ? null : s.n))}
              >
                <span className="source-n">[{s.n}]</span> {sourceLabel(s)}
              </button>
            </li>
          ))}
        </ol>
      )}
      {shown && (
        <blockquote className="source-text" data-testid="source-text">
          <div className="source-text-head">
            [{shown.n}] {sourceLabel(shown)}
          </div>
          {shown.text}
        </blockquote>
      )}
    </div>
  );
}
