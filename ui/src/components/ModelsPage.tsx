/**
 * The models folder (`GET /api/models`): one row per GGUF file with its header facts, Load and
 * Unload, and a progress bar fed by `/api/events` while a model loads. The list is fetched
 * again whenever the model state changes, so `loaded` stays right.
 */
import { useCallback, useEffect, useState, type Dispatch } from 'react';
import { api, errorText } from '../api/client';
import type { ModelInfo, ModelsResponse } from '../api/types';
import { formatBytes, formatContext, percent } from '../format';
import type { LiveAction, LiveState } from '../status/live';

export interface ModelsPageProps {
  live: LiveState;
  dispatch: Dispatch<LiveAction>;
}

/** How often an empty models folder is read again. */
const EMPTY_FOLDER_POLL_MS = 3000;

export function ModelsPage({ live, dispatch }: ModelsPageProps) {
  const [data, setData] = useState<ModelsResponse | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);
  const { model } = live;

  const refresh = useCallback(async () => {
    try {
      setData(await api.models());
      setError(null);
    } catch (e) {
      setError(errorText(e));
    }
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh, model.id, model.state]);

  // An empty folder: look again every few seconds, so a file copied in shows without a reload.
  const noFiles = data !== null && data.models.length === 0;
  useEffect(() => {
    if (!noFiles) return undefined;
    const timer = setInterval(() => void refresh(), EMPTY_FOLDER_POLL_MS);
    return () => clearInterval(timer);
  }, [noFiles, refresh]);

  const load = async (id: string) => {
    setPending(true);
    setError(null);
    dispatch({ kind: 'load-requested', id });
    try {
      await api.loadModel(id);
    } catch (e) {
      setError(errorText(e));
      void api.status().then((status) => dispatch({ kind: 'status', status })).catch(() => undefined);
    } finally {
      setPending(false);
    }
  };

  const unload = async () => {
    setPending(true);
    setError(null);
    try {
      await api.unloadModel();
      void api.status().then((status) => dispatch({ kind: 'status', status })).catch(() => undefined);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setPending(false);
    }
  };

  const loading = model.state === 'loading';
  const pct = percent(model.progress);
  // The live state is fresher than the list once the node has reported (it names itself).
  const liveKnown = live.node !== null;
  const isLoaded = (m: ModelInfo) => (liveKnown ? model.id === m.id && model.state === 'ready' : m.loaded);

  return (
    <section className="page" aria-label="Models">
      <div className="page-head">
        <h1>Models</h1>
        <p className="muted">GGUF files in the node's models folder. Loading replaces the current model.</p>
      </div>

      {loading && (
        <div className="card load-card" data-testid="model-loading">
          <div className="load-title">
            Loading <strong>{model.id}</strong>… <span data-testid="model-progress-text">{pct}%</span>
          </div>
          <div
            className="progress"
            data-testid="model-progress"
            data-progress={pct}
            role="progressbar"
            aria-valuemin={0}
            aria-valuemax={100}
            aria-valuenow={pct}
            aria-label={`Loading ${model.id ?? 'model'}`}
          >
            <div className="progress-bar" style={{ width: `${pct}%` }} />
          </div>
        </div>
      )}
      {model.state === 'empty' && live.node !== null && (
        <div className="card no-model-card" data-testid="no-model">
          <h2>No model loaded yet</h2>
          <p>
            Hearth runs GGUF models with llama.cpp. Copy a <code>.gguf</code> file into the models folder
            {data?.models_dir ? (
              <>
                {' '}
                <code data-testid="models-dir">{data.models_dir}</code>
              </>
            ) : null}{' '}
            and it shows below; then press Load. Until a model is loaded, every client of this node is told
            that no model is loaded.
          </p>
        </div>
      )}
      {model.state === 'failed' && (
        <div className="banner error" role="alert" data-testid="model-failed">
          {model.id ?? 'The model'} failed to load{model.error ? `: ${model.error}` : '.'}
        </div>
      )}
      {error && (
        <div className="banner error" role="alert" data-testid="models-error">
          {error}
        </div>
      )}

      <div className="table-wrap">
        <table className="models-table" data-testid="models-table">
          <thead>
            <tr>
              <th>Name</th>
              <th className="num">Size</th>
              <th>Quant</th>
              <th className="num">Context</th>
              <th className="col-arch">Arch</th>
              <th className="num">Params</th>
              <th className="actions-col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {data?.models.map((m) => {
              const loadedRow = isLoaded(m);
              const loadingRow = loading && model.id === m.id;
              return (
                <tr
                  key={m.id}
                  data-testid="model-row"
                  data-model-id={m.id}
                  data-loaded={loadedRow ? 'true' : 'false'}
                  className={loadedRow ? 'is-loaded' : undefined}
                >
                  <td className="model-cell">
                    <div className="model-id" title={m.file}>
                      {m.id}
                    </div>
                    {m.error ? (
                      <div className="model-error" data-testid="model-error">
                        {m.error}
                      </div>
                    ) : (
                      loadedRow && <span className="badge badge-ready">Loaded</span>
                    )}
                  </td>
                  <td className="num">{formatBytes(m.size_bytes)}</td>
                  <td>{m.quantization ?? '—'}</td>
                  <td className="num">{formatContext(m.context_length)}</td>
                  <td className="col-arch">{m.architecture ?? '—'}</td>
                  <td className="num">{m.parameters ?? '—'}</td>
                  <td className="actions-col">
                    {loadedRow ? (
                      <button type="button" className="btn" data-testid="model-unload" disabled={pending} onClick={() => void unload()}>
                        Unload
                      </button>
                    ) : loadingRow ? (
                      <span className="muted">Loading…</span>
                    ) : (
                      <button
                        type="button"
                        className="btn btn-primary"
                        data-testid="model-load"
                        disabled={pending || loading || Boolean(m.error)}
                        onClick={() => void load(m.id)}
                      >
                        Load
                      </button>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
        {data && data.models.length === 0 && (
          <p className="muted empty-table">No .gguf files in the models folder.</p>
        )}
        {!data && !error && <p className="muted empty-table">Reading the models folder…</p>}
      </div>
    </section>
  );
}
