/**
 * The hub's model search on the Models page (`GET /api/models/search`): a few words, then the
 * GGUF repositories that match, the most downloaded first, each file with its quantisation,
 * its size and whether it fits this machine at the context this node gives a request, and a
 * Download button (the download shows with its progress in the card below the results).
 */
import { useState, type FormEvent } from 'react';
import { api, errorText } from '../api/client';
import type { FoundFile, SearchAnswer } from '../api/types';
import { formatBytes, formatNumber } from '../format';
import './SearchCard.css';

export interface SearchCardProps {
  /** Start downloading `spec` (OWNER/REPO/PATH). */
  onDownload: (spec: string) => Promise<void>;
  /** A download is being started: no second click. */
  pending: boolean;
}

function fitLabel(f: FoundFile): string {
  if (f.on_gpu) return 'Fits in video memory';
  if (f.fits) return 'Fits';
  return `Too large for this machine (needs ${formatBytes(f.needs)})`;
}

export function SearchCard({ onDownload, pending }: SearchCardProps) {
  const [query, setQuery] = useState('');
  const [answer, setAnswer] = useState<SearchAnswer | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const search = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      setAnswer(await api.searchModels(query.trim()));
    } catch (err) {
      setAnswer(null);
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  // Files whose download was started from here (its progress shows below).
  const [started, setStarted] = useState<ReadonlySet<string>>(new Set());
  const download = async (spec: string) => {
    try {
      await onDownload(spec);
      setStarted((s) => new Set(s).add(spec));
    } catch {
      // The download card says why.
    }
  };

  return (
    <div className="search-card" data-testid="search-card">
      <form className="download-form" onSubmit={(e) => void search(e)}>
        <input
          type="search"
          data-testid="search-query"
          aria-label="Search the hub for a model"
          placeholder="Search Hugging Face for a model (for example: qwen 0.5b)"
          value={query}
          onChange={(e) => setQuery(e.target.value)}
        />
        <button type="submit" className="btn" data-testid="search-submit" disabled={busy || query.trim() === ''}>
          {busy ? 'Searching…' : 'Search'}
        </button>
      </form>
      {error && (
        <div className="banner error" role="alert" data-testid="search-error">
          {error}
        </div>
      )}
      {answer && answer.repos.length === 0 && (
        <p className="muted" data-testid="search-empty">
          No GGUF model on the hub matches “{answer.query}”.
        </p>
      )}
      {answer && answer.repos.length > 0 && (
        <>
          <p className="muted">
            Sizes and fit at {formatNumber(answer.context, 0)} tokens of context.
          </p>
          <ul className="search-results" data-testid="search-results">
            {answer.repos.map((r) => (
              <li key={r.id} data-testid="search-repo" data-repo-id={r.id}>
                <div className="download-head">
                  <span className="model-id">{r.id}</span>
                  <span className="muted">{formatNumber(r.downloads, 0)} downloads</span>
                </div>
                {r.error && <div className="muted">Its files could not be listed: {r.error}</div>}
                <ul className="search-files">
                  {r.files.map((f) => (
                    <li
                      key={f.spec}
                      className="search-file"
                      data-testid="search-file"
                      data-spec={f.spec}
                      data-fits={f.fits}
                      data-on-gpu={f.on_gpu}
                    >
                      <span className="model-id" title={f.spec}>
                        {f.name}
                      </span>
                      <span>{f.quant ?? '—'}</span>
                      <span>{formatBytes(f.size)}</span>
                      {f.projector_size !== undefined && (
                        <span
                          className="badge"
                          data-testid="search-vision"
                          title={`Sees images: its vision projector (${formatBytes(f.projector_size)}) comes with it`}
                        >
                          Vision
                        </span>
                      )}
                      <span className={f.fits ? 'fit-yes' : 'fit-no'} data-testid="search-fit">
                        {fitLabel(f)}
                      </span>
                      <button
                        type="button"
                        className="btn btn-primary"
                        data-testid="search-download"
                        disabled={pending || f.here || started.has(f.spec)}
                        onClick={() => void download(f.spec)}
                      >
                        {f.here ? 'Here' : started.has(f.spec) ? 'Started' : 'Download'}
                      </button>
                    </li>
                  ))}
                </ul>
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
