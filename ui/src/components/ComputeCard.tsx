/**
 * What computes on this node: where the model's layers are (the GPU, how many, its video memory,
 * or the CPU, and why fewer than asked when so), the devices llama.cpp found with their memory,
 * and the CPU variant it picked. The model's placement comes live with the status; the devices'
 * free memory is read from `/api/status` every ten seconds.
 */
import { useEffect, useState } from 'react';
import { api } from '../api/client';
import type { Compute, ModelStatus } from '../api/types';
import { formatBytes, formatBytesOf, formatPlacement } from '../format';

const REFRESH_MS = 10_000;

export function ComputeCard({ model }: { model: ModelStatus }) {
  const [compute, setCompute] = useState<Compute | null>(null);
  useEffect(() => {
    let live = true;
    const read = () =>
      api
        .status()
        .then((s) => live && setCompute(s.compute ?? null))
        .catch(() => undefined);
    void read();
    const timer = setInterval(() => void read(), REFRESH_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, []);
  const placement = model.state === 'ready' ? model.placement : undefined;
  return (
    <div className="card compute-card" data-testid="status-compute">
      <h2>Compute</h2>
      <p>
        Model on{' '}
        <strong data-testid="status-placement" data-backend={placement?.backend ?? ''} data-layers={placement?.layers ?? ''}>
          {formatPlacement(placement)}
        </strong>
        {placement && placement.vram_bytes > 0 && (
          <span className="muted" data-testid="status-vram">
            {' '}
            · {formatBytes(placement.vram_bytes)} of video memory
          </span>
        )}
      </p>
      {placement?.note && (
        <p className="form-note warn" data-testid="status-placement-note">
          {placement.note}
        </p>
      )}
      {compute && (
        <>
          <table className="models-table devices-table" data-testid="status-devices">
            <thead>
              <tr>
                <th>Device</th>
                <th>Kind</th>
                <th>Memory used</th>
              </tr>
            </thead>
            <tbody>
              {compute.devices.map((d) => (
                <tr key={d.name} data-testid="status-device" data-device={d.name} data-kind={d.kind}>
                  <td>
                    <strong>{d.name}</strong> <span className="muted">{d.description}</span>
                  </td>
                  <td>{d.kind === 'cpu' ? 'CPU' : d.kind === 'remote' ? `${d.backend} (a peer)` : `${d.backend} GPU`}</td>
                  <td>{formatBytesOf(d.memory_total - d.memory_free, d.memory_total)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {compute.cpu_variant && (
            <p className="muted" data-testid="status-cpu-variant" title={compute.cpu_features.join(' ')}>
              CPU code: <strong>{compute.cpu_variant}</strong> (the best of llama.cpp's builds for this processor)
            </p>
          )}
        </>
      )}
    </div>
  );
}
