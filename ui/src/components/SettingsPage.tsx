/**
 * Settings: whether the node is shared on the LAN, how much of the machine it may use
 * ([`ThrottleCap`]), the model documents are searched with ([`EmbeddingModel`]), the chat's
 * tools ([`McpSection`]: MCP servers), the coding agents' settings ([`AgentsSection`]: what `hearth-node connect` prints, a key made there), and the API keys other machines use then
 * (`/api/keys`): list, create (the secret is shown once, here, with a copy button) and revoke
 * with an inline confirmation. The node answers 403 to anyone but its own machine; the page
 * then says so instead of the list.
 */
import { useCallback, useEffect, useState, type FormEvent } from 'react';
import { ApiError, api, errorText } from '../api/client';
import type { CreatedKey, KeyScope, KeysResponse } from '../api/types';
import { copyText } from '../clipboard';
import { formatAgo, formatDateTime } from '../format';
import { checkKeyName, markRevoked, orderKeys } from '../settings/keys';
import { AgentsSection } from './AgentsSection';
import { CloseIcon, CopyIcon, PlusIcon } from './icons';
import { McpSection } from './McpSection';
import { EmbeddingModel } from './EmbeddingModel';
import { ThrottleCap } from './ThrottleCap';

export function SettingsPage() {
  const [data, setData] = useState<KeysResponse | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [forbidden, setForbidden] = useState(false);
  const [name, setName] = useState('');
  const [scope, setScope] = useState<KeyScope>('use');
  const [formError, setFormError] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<CreatedKey | null>(null);
  const [copied, setCopied] = useState<boolean | null>(null);
  const [confirmId, setConfirmId] = useState<string | null>(null);
  const [revoking, setRevoking] = useState<string | null>(null);
  const [actionError, setActionError] = useState<string | null>(null);

  const refresh = useCallback(async () => {
    try {
      setData(await api.listKeys());
      setLoadError(null);
      setForbidden(false);
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) setForbidden(true);
      else setLoadError(errorText(e));
    }
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh]);

  const create = async (e: FormEvent) => {
    e.preventDefault();
    const checked = checkKeyName(name);
    if (!checked.ok) {
      setFormError(checked.error);
      return;
    }
    setCreating(true);
    setFormError(null);
    setActionError(null);
    try {
      const made = await api.createKey(checked.name, scope);
      setCreated(made);
      setCopied(null);
      setName('');
      setData((d) => (d ? { ...d, keys: [...d.keys.filter((k) => k.id !== made.key.id), made.key] } : d));
      void refresh();
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setFormError(errorText(err));
    } finally {
      setCreating(false);
    }
  };

  const revoke = async (id: string) => {
    setConfirmId(null);
    setRevoking(id);
    setActionError(null);
    try {
      await api.revokeKey(id);
      setData((d) => (d ? { ...d, keys: markRevoked(d.keys, id) } : d));
      setCreated((c) => (c?.key.id === id ? null : c));
    } catch (err) {
      setActionError(errorText(err));
    } finally {
      setRevoking(null);
      void refresh();
    }
  };

  const copy = async () => {
    if (created) setCopied(await copyText(created.secret));
  };

  const now = Date.now();
  const keys = data ? orderKeys(data.keys) : [];

  return (
    <section className="page settings-page" data-testid="settings-page" aria-label="Settings">
      <div className="page-head">
        <h1>Settings</h1>
        <p className="muted">Access to this node from other machines and coding agents, and the chat's tools.</p>
      </div>

      <div className="card settings-card">
        <h2>Sharing on the LAN</h2>
        <p
          className={`lan-state${data?.exposed ? ' is-exposed' : ''}`}
          data-testid="lan-state"
          data-exposed={data ? String(data.exposed) : 'unknown'}
        >
          <span className="dot" aria-hidden="true" />
          {forbidden
            ? 'Only the machine that runs the node can see whether it is shared.'
            : !data
              ? 'Checking…'
              : data.exposed
                ? 'Shared on the LAN: other machines can use this node with an API key.'
                : 'Not shared: only this machine can use the node.'}
        </p>
        <p className="muted">
          Sharing is switched from the desktop app's tray menu (“Expose to LAN”) or by starting the node with{' '}
          <code>hearth-node serve --lan</code>.
        </p>
      </div>

      <ThrottleCap />

      <EmbeddingModel />

      <div className="card settings-card">
        <h2>API keys for other machines</h2>
        <p className="muted">
          While the node is shared, every request from another machine needs a key. In a browser there, open this node's
          address with <code>?token=&lt;key&gt;</code> added; programs send <code>Authorization: Bearer &lt;key&gt;</code>.
          Requests from this machine never need one. A key that uses the models reaches chat and the model APIs (OpenAI,
          Ollama, the WebSocket protocols) and nothing of your conversations or settings; give a key that manages the node
          only to a machine you would let change them.
        </p>

        {forbidden ? (
          <div className="banner warn" role="status" data-testid="keys-forbidden">
            API keys can only be managed on the machine that runs the node: open Settings there.
          </div>
        ) : (
          <>
            <form className="key-form" onSubmit={(e) => void create(e)}>
              <label className="visually-hidden" htmlFor="key-name">
                Key name
              </label>
              <input
                id="key-name"
                className="text-input"
                data-testid="key-name"
                placeholder="Name, e.g. laptop"
                autoComplete="off"
                maxLength={400}
                value={name}
                onChange={(e) => {
                  setName(e.target.value);
                  setFormError(null);
                }}
              />
              <label className="visually-hidden" htmlFor="key-scope">
                What the key reaches
              </label>
              <select
                id="key-scope"
                className="text-input"
                data-testid="key-scope"
                value={scope}
                title="Use: chat and the model APIs only. Manage: also conversations, models and settings."
                onChange={(e) => setScope(e.target.value === 'manage' ? 'manage' : 'use')}
              >
                <option value="use">Use the models</option>
                <option value="manage">Manage the node</option>
              </select>
              <button type="submit" className="btn btn-primary" data-testid="key-create" disabled={creating || !name.trim()}>
                <PlusIcon />
                <span>{creating ? 'Creating…' : 'Create key'}</span>
              </button>
            </form>
            {formError && (
              <p className="form-note error" role="alert" data-testid="key-form-error">
                {formError}
              </p>
            )}

            {created && (
              <div className="secret-box" data-testid="key-created" data-key-id={created.key.id} role="status">
                <p className="secret-warning">
                  <strong>Copy the key “{created.key.name}” now: it will not be shown again.</strong> The node does not keep
                  it; if it is lost, revoke it and create another.
                </p>
                <div className="secret-row">
                  <code className="secret" data-testid="key-secret">
                    {created.secret}
                  </code>
                  <button type="button" className="btn" data-testid="key-secret-copy" onClick={() => void copy()}>
                    <CopyIcon />
                    <span>{copied ? 'Copied' : 'Copy'}</span>
                  </button>
                  <button
                    type="button"
                    className="icon-btn"
                    data-testid="key-secret-dismiss"
                    aria-label="Hide the key"
                    title="Hide the key"
                    onClick={() => setCreated(null)}
                  >
                    <CloseIcon />
                  </button>
                </div>
                {copied === false && (
                  <p className="form-note error" role="alert">
                    Copying failed: select the key and copy it by hand.
                  </p>
                )}
              </div>
            )}

            {(loadError || actionError) && (
              <div className="banner error" role="alert" data-testid="keys-error">
                {actionError ?? loadError}
              </div>
            )}

            <div className="table-wrap">
              <table className="models-table keys-table" data-testid="keys-table">
                <thead>
                  <tr>
                    <th>Name</th>
                    <th>Key</th>
                    <th>Reaches</th>
                    <th>Created</th>
                    <th>Last used</th>
                    <th>State</th>
                    <th className="actions-col">
                      <span className="visually-hidden">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {keys.map((k) => (
                    <tr
                      key={k.id}
                      data-testid="key-row"
                      data-key-id={k.id}
                      data-revoked={k.revoked ? 'true' : 'false'}
                      className={k.revoked ? 'is-revoked' : undefined}
                    >
                      <td className="key-name-cell">{k.name}</td>
                      <td>
                        <code className="key-prefix" data-testid="key-prefix">
                          {k.prefix}…
                        </code>
                      </td>
                      <td data-testid="key-scope-cell" data-scope={k.scope ?? 'manage'}>
                        {k.scope === 'use' ? 'Models only' : 'Everything'}
                      </td>
                      <td title={formatDateTime(k.created_at)}>{formatAgo(k.created_at, now)}</td>
                      <td title={formatDateTime(k.last_used_at)} data-testid="key-last-used">
                        {formatAgo(k.last_used_at, now)}
                      </td>
                      <td>
                        <span className={`badge ${k.revoked ? 'badge-error' : 'badge-active'}`} data-testid="key-state">
                          {k.revoked ? 'Revoked' : 'Active'}
                        </span>
                      </td>
                      <td className="actions-col">
                        {k.revoked ? null : confirmId === k.id ? (
                          <span className="confirm-inline" role="alertdialog" aria-label={`Revoke ${k.name}?`}>
                            <span>Revoke? It stops working at once.</span>
                            <button
                              type="button"
                              className="btn btn-danger"
                              data-testid="key-revoke-confirm"
                              onClick={() => void revoke(k.id)}
                            >
                              Revoke
                            </button>
                            <button
                              type="button"
                              className="icon-btn"
                              data-testid="key-revoke-cancel"
                              aria-label="Cancel"
                              onClick={() => setConfirmId(null)}
                            >
                              <CloseIcon />
                            </button>
                          </span>
                        ) : (
                          <button
                            type="button"
                            className="btn"
                            data-testid="key-revoke"
                            disabled={revoking === k.id}
                            onClick={() => setConfirmId(k.id)}
                          >
                            {revoking === k.id ? 'Revoking…' : 'Revoke'}
                          </button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
              {data && keys.length === 0 && (
                <p className="muted empty-table" data-testid="keys-empty">
                  No keys yet.
                </p>
              )}
              {!data && !loadError && <p className="muted empty-table">Reading the keys…</p>}
            </div>
          </>
        )}
      </div>

      <AgentsSection onKeyMade={() => void refresh()} />

      <McpSection />
    </section>
  );
}
