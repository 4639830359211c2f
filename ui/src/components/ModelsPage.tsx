/**
 * The models folder (`GET /api/models`): one row per model with its header facts, whether it is
 * loaded (several can be; requests load the model they name), Load, Unload and Delete, the
 * models of Ollama and LM Studio to import, and a progress bar fed by `/api/events` while a
 * model loads. The list is read again when the model state changes and every few seconds.
 * Split spreads a model's layers over this machine and the peers that share their memory
 * ([`SplitCard`] shows where they are).
 */
import { useCallback, useEffect, useState, type Dispatch } from 'react';
import { api, errorText } from '../api/client';
import type { ModelInfo, ModelsResponse } from '../api/types';
import { formatBytes, formatContext, formatPlacement, percent } from '../format';
import type { LiveAction, LiveState } from '../status/live';
import { DownloadCard } from './DownloadCard';
import { ImportCard } from './ImportCard';
import { SplitCard } from './SplitCard';

export interface ModelsPageProps {
  live: LiveState;
  dispatch: Dispatch<LiveAction>;
}

/** How often the models folder is read again (models load and unload on requests too). */
const FOLDER_POLL_MS = 3000;

export function ModelsPage({ live, dispatch }: ModelsPageProps) {
  const [data, setData] = useState<ModelsResponse | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);
  /** The model whose Delete was pressed once: the row asks to confirm. */
  const [confirming, setConfirming] = useState<string | null>(null);
  /** Bumped when a split starts, so the split card reads the placements at once. */
  const [splits, setSplits] = useState(0);
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
  const onDownloaded = useCallback(() => void refresh(), [refresh]);

  // Look again every few seconds: a file copied in, a model loaded or unloaded by a request.
  useEffect(() => {
    const timer = setInterval(() => void refresh(), FOLDER_POLL_MS);
    return () => clearInterval(timer);
  }, [refresh]);

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

  const unload = async (id: string) => {
    setPending(true);
    setError(null);
    try {
      await api.unloadModel(id);
      void api.status().then((status) => dispatch({ kind: 'status', status })).catch(() => undefined);
      await refresh();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setPending(false);
    }
  };

  const split = async (id: string) => {
    setPending(true);
    setError(null);
    try {
      await api.splitModel(id);
      setSplits((n) => n + 1);
      await refresh();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setPending(false);
    }
  };

  const remove = async (m: ModelInfo) => {
    setConfirming(null);
    setPending(true);
    setError(null);
    try {
      await api.deleteModel(m.id);
      await refresh();
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
  const isLoaded = (m: ModelInfo) =>
    m.state === 'loaded' || (liveKnown ? model.id === m.id && model.state === 'ready' : m.loaded);

  return (
    <section className="page" aria-label="Models">
      <div className="page-head">
        <h1>Models</h1>
        <p className="muted">
          GGUF models in the node's models folder. Several can be loaded at once; a request that names a model loads
          it, and the least recently used one makes room when memory runs short.
          {data?.disk_bytes !== undefined && (
            <>
              {' '}
              <span data-testid="models-disk">{formatBytes(data.disk_bytes)} on disk.</span>
            </>
          )}
        </p>
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
            and it shows below, import one from another app, or download one; then press Load. Until a model is loaded,
            every client of this node is told that no model is loaded.
          </p>
        </div>
      )}
      <SplitCard generation={splits} />
      <ImportCard onImported={() => void refresh()} />
      <DownloadCard onDownloaded={onDownloaded} fromPeers={data?.from_peers ?? []} />
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
                    {m.vision && (
                      <span
                        className="badge"
                        data-testid="model-vision"
                        title="A vision projector is beside it: it reads images"
                      >
                        Vision
                      </span>
                    )}
                    {m.audio && (
                      <span
                        className="badge"
                        data-testid="model-audio"
                        title="Its projector has an audio encoder: it hears WAV and MP3 clips"
                      >
                        Audio
                      </span>
                    )}
                    {loadedRow && m.placement && (
                      <span
                        className={`badge ${m.placement.layers > 0 ? 'badge-active' : ''}`}
                        data-testid="model-placement"
                        data-backend={m.placement.backend}
                        data-layers={m.placement.layers}
                        title={[
                          m.placement.device_descriptions.join(', '),
                          m.placement.vram_bytes > 0 ? `${formatBytes(m.placement.vram_bytes)} of video memory` : '',
                          m.placement.note ?? '',
                        ]
                          .filter(Boolean)
                          .join(' · ')}
                      >
                        {formatPlacement(m.placement)}
                      </span>
                    )}
                    {loadedRow && m.context !== undefined && (
                      <span
                        className="badge"
                        data-testid="model-context"
                        data-context={m.context}
                        title="The context its requests share: one KV cache, one request may take all of it"
                      >
                        {formatContext(m.context)} context
                        {m.kv_bytes ? ` · ${formatBytes(m.kv_bytes)} ${m.kv_type ?? ''} KV` : ''}
                      </span>
                    )}
                    {m.state === 'failed' && m.load_error && !m.error && (
                      <div className="model-error" role="alert" data-testid="model-load-failed">
                        Failed to load: {m.load_error}
                      </div>
                    )}
                    {m.state === 'loading' && m.load_progress !== undefined && !(loading && model.id === m.id) && (
                      <div
                        className="progress"
                        data-testid="model-row-progress"
                        role="progressbar"
                        aria-valuemin={0}
                        aria-valuemax={100}
                        aria-valuenow={percent(m.load_progress)}
                        aria-label={`Loading ${m.id}`}
                      >
                        <div className="progress-bar" style={{ width: `${percent(m.load_progress)}%` }} />
                      </div>
                    )}
                    {m.imported && (
                      <div className="muted model-link" data-testid="model-linked" title={m.linked_to}>
                        imported, used where it is
                      </div>
                    )}
                    {m.outside && (
                      <div className="muted model-link" data-testid="model-outside" title={m.linked_to}>
                        loaded from outside the models folder
                      </div>
                    )}
                    {(m.on_peers?.length ?? 0) > 0 && (
                      <div className="muted model-link" data-testid="model-on-peers">
                        also loaded on {m.on_peers?.join(', ')}
                      </div>
                    )}
                  </td>
                  <td className="num">{formatBytes(m.size_bytes)}</td>
                  <td>{m.quantization ?? '—'}</td>
                  <td className="num">{formatContext(m.context_length)}</td>
                  <td className="col-arch">{m.architecture ?? '—'}</td>
                  <td className="num">{m.parameters ?? '—'}</td>
                  <td className="actions-col">
                    {loadedRow ? (
                      <button type="button" className="btn" data-testid="model-unload" disabled={pending} onClick={() => void unload(m.id)}>
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
                    {!loadingRow && confirming !== m.id && (
                      <button
                        type="button"
                        className="btn"
                        data-testid="model-split"
                        title="Spread its layers over this machine and the peers that share their memory"
                        disabled={pending || Boolean(m.error)}
                        onClick={() => void split(m.id)}
                      >
                        Split
                      </button>
                    )}
                    {!loadedRow && !loadingRow && confirming !== m.id && (
                      <button type="button" className="btn" data-testid="model-delete" disabled={pending} onClick={() => setConfirming(m.id)}>
                        Delete
                      </button>
                    )}
                    {!loadedRow && !loadingRow && confirming === m.id && (
                      <span className="confirm-delete" data-testid="model-delete-ask">
                        {m.imported ? 'Remove the link (the other app keeps its file)?' : `Delete ${m.file} from the disk?`}{' '}
                        <button type="button" className="btn btn-danger" data-testid="model-delete-confirm" disabled={pending} onClick={() => void remove(m)}>
                          Delete
                        </button>{' '}
                        <button type="button" className="btn" data-testid="model-delete-cancel" onClick={() => setConfirming(null)}>
                          Cancel
                        </button>
                      </span>
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
