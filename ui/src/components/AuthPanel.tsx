/**
 * Shown instead of the pages when the node answers 401: it is shared on the LAN and this
 * browser has no valid API key. The user pastes one (stored like a `?token=` key) and retries.
 */
import { useEffect, useRef, useState, type FormEvent } from 'react';
import { normalizeToken } from '../api/token';

export interface AuthPanelProps {
  /** The refused request carried a key: it is wrong or was revoked. */
  keyRefused: boolean;
  /** Retry with `key` stored as this page's key, or with the stored one (`null`). */
  onRetry: (key: string | null) => void;
}

export function AuthPanel({ keyRefused, onRetry }: AuthPanelProps) {
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<string | null>(null);
  const input = useRef<HTMLInputElement>(null);

  useEffect(() => {
    input.current?.focus();
  }, []);

  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!draft.trim()) {
      onRetry(null);
      return;
    }
    const key = normalizeToken(draft);
    if (!key) {
      setError('That is not an API key: a key has no spaces and only plain letters, digits and signs.');
      return;
    }
    onRetry(key);
  };

  return (
    <div className="app">
      <header className="app-header">
        <span className="brand">
          <span className="brand-mark" aria-hidden="true">
            ◆
          </span>
          <span className="brand-name">Hearth</span>
        </span>
      </header>
      <main className="app-main">
        <section className="page" aria-label="API key needed">
          <form className="card auth-panel" data-testid="auth-panel" onSubmit={submit}>
            <h1>This node is shared on the LAN and needs an API key</h1>
            {keyRefused ? (
              <p className="banner error" role="alert" data-testid="auth-refused">
                The node did not accept the key this browser has: it may have been revoked or mistyped.
              </p>
            ) : null}
            <p>
              Ask whoever runs the node for a key: it is created in <strong>Settings</strong> on the machine that runs it.
              Paste it here, or open this page with <code>?token=&lt;key&gt;</code> added to its address. This browser keeps
              it for next time.
            </p>
            <label className="field">
              <span>API key</span>
              <input
                ref={input}
                type="text"
                className="text-input"
                data-testid="auth-key-input"
                placeholder="hearth_…"
                autoComplete="off"
                autoCapitalize="off"
                spellCheck={false}
                value={draft}
                onChange={(e) => {
                  setDraft(e.target.value);
                  setError(null);
                }}
              />
            </label>
            {error && (
              <p className="form-note error" role="alert" data-testid="auth-error">
                {error}
              </p>
            )}
            <div className="form-actions">
              <button type="submit" className="btn btn-primary" data-testid="auth-retry">
                {draft.trim() ? 'Use this key' : 'Retry'}
              </button>
            </div>
          </form>
        </section>
      </main>
    </div>
  );
}
