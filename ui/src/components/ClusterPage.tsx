/**
 * The LAN cluster (`/api/cluster`, read once a second): every connected peer with its name,
 * address, kind (Hearth, encrypted; TealeNet, plain text), thermal badge, throttle, queue,
 * models and measured tokens/s, with a live chart per peer; peers added and removed by address;
 * the cluster passcode; and the TealeNet compatibility switch, which says that such traffic is
 * not encrypted. Changes work only from the node's own machine (403 elsewhere).
 */
import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { ApiError, api, errorText } from '../api/client';
import type { ClusterPatch, ClusterView } from '../api/types';
import { addSample, checkAddress, HISTORY_MS, kindLabel, thermalTone, type PeerHistory } from '../cluster/view';
import { formatNumber } from '../format';
import { Sparkline } from './Sparkline';

const POLL_MS = 1000;

export function ClusterPage() {
  const [view, setView] = useState<ClusterView | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [history, setHistory] = useState<PeerHistory>({});
  const [address, setAddress] = useState('');
  const [addError, setAddError] = useState<string | null>(null);
  const [passcode, setPasscode] = useState('');
  const [settingsError, setSettingsError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const alive = useRef(true);

  const refresh = useCallback(async () => {
    try {
      const v = await api.cluster();
      if (!alive.current) return;
      setView(v);
      setHistory((h) => addSample(h, v.peers, Date.now()));
      setLoadError(null);
    } catch (e) {
      if (alive.current) setLoadError(errorText(e));
    }
  }, []);

  useEffect(() => {
    alive.current = true;
    void refresh();
    const timer = window.setInterval(() => void refresh(), POLL_MS);
    return () => {
      alive.current = false;
      window.clearInterval(timer);
    };
  }, [refresh]);

  const forbidden = (e: unknown) =>
    e instanceof ApiError && e.status === 403 ? 'Only the machine that runs the node can change its cluster.' : errorText(e);

  const add = async (e: FormEvent) => {
    e.preventDefault();
    const checked = checkAddress(address);
    if (!checked.ok) {
      setAddError(checked.error);
      return;
    }
    setAddError(null);
    try {
      await api.addPeer(checked.address);
      setAddress('');
      void refresh();
    } catch (err) {
      setAddError(forbidden(err));
    }
  };

  const remove = async (addr: string) => {
    try {
      await api.removePeer(addr);
      void refresh();
    } catch (err) {
      setAddError(forbidden(err));
    }
  };

  const change = async (patch: ClusterPatch) => {
    setBusy(true);
    setSettingsError(null);
    try {
      setView(await api.patchCluster(patch));
      if (patch.passcode !== undefined) setPasscode('');
    } catch (err) {
      setSettingsError(forbidden(err));
    } finally {
      setBusy(false);
    }
  };

  const savePasscode = (e: FormEvent) => {
    e.preventDefault();
    if (!passcode.trim()) {
      setSettingsError('Type a passcode, or use Clear to remove it.');
      return;
    }
    void change({ passcode: passcode.trim() });
  };

  const now = Date.now();
  const peers = view?.peers ?? [];

  return (
    <section className="page cluster-page" data-testid="cluster-page" aria-label="Cluster">
      <div className="page-head">
        <h1>Cluster</h1>
        <p className="muted">
          The computers this node shares work with. A request goes to the best node that has its model; an answer whose
          node stops is finished by another.
        </p>
      </div>
      {loadError && (
        <p className="banner" role="alert" data-testid="cluster-error">
          {loadError}
        </p>
      )}

      <div className="card settings-card">
        <h2>
          Peers <span className="badge" data-testid="cluster-peer-count">{peers.length}</span>
        </h2>
        {peers.length === 0 ? (
          <p className="muted empty-table" data-testid="cluster-empty">
            No peer connected. Nodes on this LAN with the same passcode appear here by themselves; others can be added by
            address below.
          </p>
        ) : (
          <div className="table-wrap">
            <table className="keys-table cluster-table" data-testid="cluster-peers">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>Address</th>
                  <th>Kind</th>
                  <th>Thermal</th>
                  <th>Throttle</th>
                  <th>Queue</th>
                  <th>Models</th>
                  <th>Tokens/s</th>
                  <th>Last 5 minutes</th>
                </tr>
              </thead>
              <tbody>
                {peers.map((p) => (
                  <tr key={p.addr} data-testid="cluster-peer" data-name={p.name} data-kind={p.kind}>
                    <td>
                      {p.name}
                      {p.degraded && <span className="badge badge-error"> silent</span>}
                    </td>
                    <td>
                      <code>{p.addr}</code>
                    </td>
                    <td>
                      <span className={`badge ${p.kind === 'hearth' ? 'badge-ready' : 'badge-interrupted'}`}>
                        {kindLabel(p.kind)}
                      </span>
                    </td>
                    <td>
                      <span className={`badge tone-${thermalTone(p.thermal_level)}`} data-testid="cluster-peer-thermal">
                        {p.thermal_level}
                      </span>
                    </td>
                    <td>{p.throttle} %</td>
                    <td>{p.queue_depth}</td>
                    <td>{p.loaded_models.join(', ') || '—'}</td>
                    <td>{p.tokens_per_s > 0 ? formatNumber(p.tokens_per_s) : '—'}</td>
                    <td>
                      <Sparkline
                        points={(history[p.addr] ?? []).map((s) => ({ time: s.time, value: s.tokensPerS + s.queue }))}
                        now={now}
                        windowMs={HISTORY_MS}
                        min={0}
                        testId="cluster-peer-chart"
                        label={`${p.name}: tokens/s and queue`}
                      />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </div>

      <div className="card settings-card">
        <h2>Add a peer by address</h2>
        <form className="key-form" onSubmit={add}>
          <input
            className="text-input"
            data-testid="cluster-address"
            placeholder="192.168.1.20:8421"
            value={address}
            onChange={(e) => setAddress(e.target.value)}
            aria-label="Peer address"
          />
          <button className="btn btn-primary" type="submit" data-testid="cluster-add">
            Add
          </button>
        </form>
        {addError && (
          <p className="form-note model-error" role="alert" data-testid="cluster-add-error">
            {addError}
          </p>
        )}
        {view && view.dialing.length > 0 && (
          <ul className="muted" data-testid="cluster-dialing">
            {view.dialing.map((a) => (
              <li key={a}>
                <code>{a}</code>{' '}
                <button className="btn btn-danger" type="button" onClick={() => void remove(a)}>
                  Remove
                </button>
              </li>
            ))}
          </ul>
        )}
      </div>

      <div className="card settings-card">
        <h2>Passcode and compatibility</h2>
        <p className="muted" data-testid="cluster-passcode-state" data-set={view ? String(view.passcode_set) : 'unknown'}>
          {view?.passcode_set
            ? 'A passcode is set: only nodes with the same one join. Between Hearth nodes it never crosses the network.'
            : 'No passcode: the cluster stays on this machine until one is set.'}
        </p>
        <form className="key-form" onSubmit={savePasscode}>
          <input
            className="text-input"
            type="password"
            data-testid="cluster-passcode"
            placeholder="New passcode"
            value={passcode}
            onChange={(e) => setPasscode(e.target.value)}
            aria-label="Cluster passcode"
          />
          <button className="btn btn-primary" type="submit" disabled={busy} data-testid="cluster-passcode-save">
            Set
          </button>
          <button className="btn" type="button" disabled={busy || !view?.passcode_set} onClick={() => void change({ passcode: null })}>
            Clear
          </button>
        </form>
        <label className="field-row">
          <input
            type="checkbox"
            data-testid="cluster-compat"
            checked={view?.tealenet_compat ?? false}
            disabled={busy || !view}
            onChange={(e) => void change({ tealenet_compat: e.target.checked })}
          />{' '}
          TealeNet compatibility
        </label>
        <p className="muted secret-warning">
          TealeNet peers (the Teale app and node) speak plain text: with compatibility on, what they send and receive is
          not encrypted, and their passcode check is a hash anyone on the LAN can see.
        </p>
        {settingsError && (
          <p className="form-note model-error" role="alert" data-testid="cluster-settings-error">
            {settingsError}
          </p>
        )}
      </div>
    </section>
  );
}
