/**
 * Downloads (`/api/models/downloads`): first the models the cluster's peers have and this node
 * lacks, each with "Get from PEER" (a transfer over the cluster); then the hub's search
 * (`SearchCard`) and a field for a file on the hub, `OWNER/REPO/FILE.gguf`; and each download with a progress bar, speed, time left and
 * Cancel. A finished one is in the models table (the parent reads it again); a failed one
 * says why.
 */
import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { api, errorText } from '../api/client';
import type { Download, PeerModel } from '../api/types';
import { formatBytes, percent } from '../format';
import { SearchCard } from './SearchCard';

export interface DownloadCardProps {
  /** Called when a download finishes, so the models table is read again. */
  onDownloaded: () => void;
  /** Models only the cluster's peers have. */
  fromPeers: PeerModel[];
}

/** How often downloads under way are read. */
const POLL_MS = 1000;

const STATE_LABEL: Record<Download['state'], string> = {
  starting: 'Starting',
  downloading: 'Downloading',
  retrying: 'Interrupted, resuming',
  verifying: 'Checking SHA-256',
  done: 'Done',
  failed: 'Failed',
  cancelled: 'Cancelled',
};

const isOver = (d: Download) => d.state === 'done' || d.state === 'failed' || d.state === 'cancelled';

function timeLeft(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '';
  if (seconds < 60) return `${Math.ceil(seconds)} s left`;
  if (seconds < 3600) return `${Math.ceil(seconds / 60)} min left`;
  return `${(seconds / 3600).toFixed(1)} h left`;
}

export function DownloadCard({ onDownloaded, fromPeers }: DownloadCardProps) {
  const [name, setName] = useState('');
  const [downloads, setDownloads] = useState<Download[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [pending, setPending] = useState(false);
  const doneSeen = useRef(new Set<string>());

  const refresh = useCallback(async () => {
    try {
      const list = (await api.downloads()).downloads;
      setDownloads(list);
      const fresh = list.filter((d) => d.state === 'done' && !doneSeen.current.has(d.id));
      fresh.forEach((d) => doneSeen.current.add(d.id));
      if (fresh.length > 0) onDownloaded();
    } catch (e) {
      setError(errorText(e));
    }
  }, [onDownloaded]);

  useEffect(() => {
    void refresh();
  }, [refresh]);

  const running = downloads.some((d) => !isOver(d));
  useEffect(() => {
    if (!running) return;
    const timer = setInterval(() => void refresh(), POLL_MS);
    return () => clearInterval(timer);
  }, [running, refresh]);

  const download = async (model: string) => {
    setPending(true);
    setError(null);
    try {
      await api.startDownload(model);
      setName('');
      await refresh();
    } catch (err) {
      setError(errorText(err));
      throw err;
    } finally {
      setPending(false);
    }
  };

  const start = (e: FormEvent) => {
    e.preventDefault();
    download(name.trim()).catch(() => undefined);
  };

  // A model a download is under way for is not offered again.
  const offered = fromPeers.filter((m) => !downloads.some((d) => d.id === `${m.id}.gguf` && !isOver(d)));

  const cancel = async (id: string) => {
    setError(null);
    try {
      await api.cancelDownload(id);
    } catch (err) {
      setError(errorText(err));
    }
    await refresh();
  };

  return (
    <div className="card download-card" data-testid="download-card">
      <h2>Download a model</h2>
      {offered.length > 0 && (
        <ul className="download-list" data-testid="peer-offers">
          {offered.map((m) => (
            <li key={m.id} className="download-head" data-testid="peer-offer" data-model-id={m.id}>
              <span className="model-id">{m.id}</span>
              <span className="muted">on {m.peers.join(', ')}: no download from the internet needed</span>
              <button type="button" className="btn btn-primary" data-testid="peer-get" disabled={pending} onClick={() => void download(m.id).catch(() => undefined)}>
                Get from {m.peers[0]}
              </button>
            </li>
          ))}
        </ul>
      )}
      <SearchCard onDownload={download} pending={pending} />
      <form className="download-form" onSubmit={start}>
        <input
          type="text"
          data-testid="download-name"
          aria-label="Model to download (OWNER/REPO/FILE.gguf, or a peer's model name)"
          placeholder="OWNER/REPO/FILE.gguf from Hugging Face, or the name of a model a peer has"
          value={name}
          onChange={(e) => setName(e.target.value)}
        />
        <button type="submit" className="btn btn-primary" data-testid="download-start" disabled={pending || name.trim() === ''}>
          Download
        </button>
      </form>
      {error && (
        <div className="banner error" role="alert" data-testid="download-error">
          {error}
        </div>
      )}
      <ul className="download-list">
        {downloads.map((d) => {
          const pct = d.total ? percent(d.received / d.total) : 0;
          return (
            <li key={d.id} data-testid="download" data-download-id={d.id} data-state={d.state}>
              <div className="download-head">
                <span className="model-id" title={d.model}>
                  {d.id}
                </span>
                <span className="muted" data-testid="download-state">
                  {STATE_LABEL[d.state]}
                  {d.state === 'downloading' || d.state === 'retrying'
                    ? ` · ${formatBytes(d.received)} of ${formatBytes(d.total)} · ${formatBytes(d.bytes_per_second)}/s ${timeLeft(d.seconds_left)}`
                    : ''}
                  {d.sources.length > 0 ? ` · from ${d.sources.join(', ')}` : ''}
                </span>
                {!isOver(d) && (
                  <button type="button" className="btn" data-testid="download-cancel" onClick={() => void cancel(d.id)}>
                    Cancel
                  </button>
                )}
              </div>
              {!isOver(d) && (
                <div
                  className="progress"
                  role="progressbar"
                  aria-valuemin={0}
                  aria-valuemax={100}
                  aria-valuenow={pct}
                  aria-label={`Downloading ${d.id}`}
                  data-testid="download-progress"
                  data-progress={pct}
                >
                  <div className="progress-bar" style={{ width: `${pct}%` }} />
                </div>
              )}
              {d.state === 'failed' && d.error && (
                <div className="banner error" data-testid="download-failed">
                  {d.error}
                </div>
              )}
            </li>
          );
        })}
      </ul>
    </div>
  );
}
