/**
 * Split models (`GET /api/models/split`): for each model split across this machine and peers
 * that share their memory, how many layers each holds (and about how much memory their weights
 * take), whether it serves yet, why it failed
 * (which peer was lost; it loads again once peers share memory), and "Serve whole" to end the
 * split. Read every few seconds; hidden while nothing is split.
 */
import { useCallback, useEffect, useState } from 'react';
import { api, errorText } from '../api/client';
import type { SplitsResponse } from '../api/types';
import { formatBytes } from '../format';

/** How often the placements are read again (a lost peer changes them). */
const SPLIT_POLL_MS = 2000;

export interface SplitCardProps {
  /** Changes whenever a split was started here, to read the placements at once. */
  generation: number;
}

export function SplitCard({ generation }: SplitCardProps) {
  const [data, setData] = useState<SplitsResponse | null>(null);
  const [error, setError] = useState<string | null>(null);

  const refresh = useCallback(async () => {
    try {
      setData(await api.splits());
    } catch {
      // An older node without split models: nothing to show.
      setData(null);
    }
  }, []);

  useEffect(() => {
    void refresh();
    const timer = setInterval(() => void refresh(), SPLIT_POLL_MS);
    return () => clearInterval(timer);
  }, [refresh, generation]);

  const unsplit = async (model: string) => {
    setError(null);
    try {
      await api.unsplitModel(model);
      await refresh();
    } catch (e) {
      setError(errorText(e));
    }
  };

  if (!data || data.splits.length === 0) return null;
  return (
    <div className="card" data-testid="split-card">
      <h2>Split models</h2>
      <p className="muted">Each runs in a process of its own, with part of its layers in peers' memory.</p>
      {error && (
        <div className="banner error" role="alert" data-testid="split-error">
          {error}
        </div>
      )}
      {data.splits.map((s) => (
        <div key={s.model} className="split-row" data-testid="split-row" data-model-id={s.model} data-state={s.state}>
          <div>
            <strong>{s.model}</strong>{' '}
            <span className={s.state === 'ready' ? 'badge badge-ready' : 'badge'} data-testid="split-state">
              {s.state === 'ready' ? 'Serving' : s.state === 'loading' ? 'Loading…' : 'Stopped: loads again when peers can take it'}
            </span>
          </div>
          <ul className="split-placement" data-testid="split-placement">
            <li>
              This machine: {s.local_layers} layers, about {formatBytes(s.local_bytes)}
            </li>
            {s.peers.map((p) => (
              <li key={p.addr} data-testid="split-peer">
                {p.name} ({p.addr}): {p.layers} layers, about {formatBytes(p.bytes)}
              </li>
            ))}
          </ul>
          {s.error && (
            <div className="model-error" data-testid="split-failure">
              {s.error}
            </div>
          )}
          <button type="button" className="btn" data-testid="split-stop" onClick={() => void unsplit(s.model)}>
            Serve whole
          </button>
        </div>
      ))}
    </div>
  );
}
