/**
 * Settings: how much of this machine Hearth may use (`PATCH /api/node`, the throttle cap,
 * 0-100 %). The engine decodes in a duty cycle below 100 and peers see the figure in the next
 * heartbeat; the temperature and "Pause serving" can lower it further.
 */
import { useEffect, useState } from 'react';
import { ApiError, api, errorText } from '../api/client';

export function ThrottleCap() {
  const [cap, setCap] = useState<number | null>(null);
  const [saved, setSaved] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    api
      .status()
      .then((s) => {
        const c = s.throttle_cap ?? 100;
        setCap(c);
        setSaved(c);
      })
      .catch((e: unknown) => setError(errorText(e)));
  }, []);

  const save = async () => {
    if (cap === null) return;
    setError(null);
    try {
      const r = await api.setThrottleCap(cap);
      setSaved(r.throttle_cap);
    } catch (e) {
      setError(
        e instanceof ApiError && e.status === 403 ? 'Only the machine that runs the node can change this.' : errorText(e),
      );
    }
  };

  return (
    <div className="card settings-card">
      <h2>How much of this machine to give</h2>
      <p className="muted">
        Hearth decodes at most this share of the time; other nodes see it and send less work here. Heat lowers it further
        (fair 75 %, serious 25 %, critical 0 %).
      </p>
      <div className="key-form">
        <input
          type="range"
          min={0}
          max={100}
          step={5}
          value={cap ?? 100}
          disabled={cap === null}
          data-testid="throttle-cap"
          aria-label="Throttle cap"
          onChange={(e) => setCap(Number(e.target.value))}
        />
        <span data-testid="throttle-cap-value">{cap ?? '…'} %</span>
        <button
          type="button"
          className="btn btn-primary"
          data-testid="throttle-cap-save"
          disabled={cap === null || cap === saved}
          onClick={() => void save()}
        >
          Save
        </button>
      </div>
      {error && (
        <p className="form-note error" role="alert" data-testid="throttle-cap-error">
          {error}
        </p>
      )}
    </div>
  );
}
