/**
 * Models Ollama and LM Studio already downloaded (`GET /api/models/importable`), offered for
 * import without a copy: the node links each file into its models folder, where it shows in
 * the table at once. Hidden when there is nothing to import, and in a browser on another
 * machine (the list is answered only to the node's own machine).
 */
import { useCallback, useEffect, useState } from 'react';
import { api, ApiError, errorText } from '../api/client';
import type { ImportableModel } from '../api/types';
import { formatBytes } from '../format';

export interface ImportCardProps {
  /** Called after an import, so the models table is read again. */
  onImported: () => void;
}

const SOURCE_NAMES: Record<ImportableModel['source'], string> = { ollama: 'Ollama', lmstudio: 'LM Studio' };

export function ImportCard({ onImported }: ImportCardProps) {
  const [found, setFound] = useState<ImportableModel[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);

  const refresh = useCallback(async () => {
    try {
      setFound((await api.importable()).models);
    } catch (e) {
      // Another machine's files are only offered on that machine: nothing to show here.
      if (e instanceof ApiError && e.status === 403) setFound([]);
      else setError(errorText(e));
    }
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh]);

  const importModels = async (id?: string) => {
    setPending(true);
    setError(null);
    try {
      const { failed } = await api.importModels(id);
      // The others went in; these say why not.
      if (failed.length > 0) setError(failed.map((f) => `${f.id}: ${f.error}`).join('; '));
      onImported();
      await refresh();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setPending(false);
    }
  };

  const waiting = (found ?? []).filter((m) => !m.imported);
  if (waiting.length === 0 && !error) return null;
  return (
    <div className="card import-card" data-testid="import-card">
      <div className="import-head">
        <h2>Models from other apps</h2>
        {waiting.length > 1 && (
          <button type="button" className="btn" data-testid="import-all" disabled={pending} onClick={() => void importModels()}>
            Import all
          </button>
        )}
      </div>
      <p className="muted">Already downloaded by Ollama or LM Studio: Hearth uses them where they are, without a copy.</p>
      {error && (
        <div className="banner error" role="alert" data-testid="import-error">
          {error}
        </div>
      )}
      <ul className="import-list">
        {waiting.map((m) => (
          <li key={m.id} data-testid="importable" data-model-id={m.id}>
            <span className="model-id" title={m.path}>
              {m.id}
            </span>{' '}
            <span className="muted">
              {SOURCE_NAMES[m.source]} · {formatBytes(m.size_bytes)}
            </span>{' '}
            <button type="button" className="btn btn-primary" data-testid="import-one" disabled={pending} onClick={() => void importModels(m.id)}>
              Import
            </button>
          </li>
        ))}
      </ul>
    </div>
  );
}
