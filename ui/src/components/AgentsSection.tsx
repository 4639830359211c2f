/**
 * Settings → Coding agents: for the agent picked, what `hearth-node connect` prints for this
 * node (`GET /api/agents`), to copy; a warning when the model's context is smaller than the
 * agent's own prompt; and, while the node is shared, a key made in one click (`POST /api/keys`,
 * scope `use`) filled into the text. The key lives only in this section's state, as a key made
 * under API keys does, until hidden or the page is left.
 */
import { useCallback, useEffect, useState } from 'react';
import { ApiError, api, errorText } from '../api/client';
import type { AgentsResponse, CreatedKey } from '../api/types';
import { copyText } from '../clipboard';
import { agentKeyName, agentText, tooSmallWarning } from '../settings/agents';
import { CloseIcon, CopyIcon, PlusIcon } from './icons';

export function AgentsSection({ onKeyMade }: { onKeyMade?: () => void }) {
  const [data, setData] = useState<AgentsResponse | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [picked, setPicked] = useState('claude');
  const [made, setMade] = useState<CreatedKey | null>(null);
  const [making, setMaking] = useState(false);
  const [keyError, setKeyError] = useState<string | null>(null);
  const [copied, setCopied] = useState<boolean | null>(null);

  const load = useCallback(async () => {
    try {
      setData(await api.agents());
      setError(null);
    } catch (e) {
      setData(null);
      setError(
        e instanceof ApiError && e.status === 403
          ? 'Only the machine that runs the node (or a key that manages it) sees the agents’ settings.'
          : errorText(e),
      );
    }
  }, []);

  useEffect(() => {
    void load();
  }, [load]);

  const agent = data?.agents.find((a) => a.id === picked) ?? data?.agents[0] ?? null;
  const text = data && agent ? agentText(data, agent, made?.secret ?? null) : '';
  const warning = data && agent ? tooSmallWarning(data.model, agent) : null;

  const makeKey = async () => {
    if (!agent) return;
    setMaking(true);
    setKeyError(null);
    try {
      setMade(await api.createKey(agentKeyName(agent), 'use'));
      setCopied(null);
      onKeyMade?.();
    } catch (e) {
      setKeyError(
        e instanceof ApiError && e.status === 403 ? 'Keys can only be made on the machine that runs the node.' : errorText(e),
      );
    } finally {
      setMaking(false);
    }
  };

  const copy = async () => setCopied(await copyText(text));

  return (
    <div className="card settings-card" data-testid="agents-section">
      <h2>Coding agents</h2>
      <p className="muted">
        Claude Code, Codex, Qwen Code, opencode and Continue work against this node. Paste these settings where the agent
        reads them (it is what <code>hearth-node connect</code> prints).
      </p>
      {error && (
        <div className="banner warn" role="status" data-testid="agents-error">
          {error}
        </div>
      )}
      {data && agent && (
        <>
          <div className="key-form">
            <label className="visually-hidden" htmlFor="agent-picker">
              Agent
            </label>
            <select
              id="agent-picker"
              className="text-input"
              data-testid="agent-picker"
              value={agent.id}
              onChange={(e) => {
                setPicked(e.target.value);
                setCopied(null);
              }}
            >
              {data.agents.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.name}
                </option>
              ))}
            </select>
            <span className="muted" data-testid="agent-model">
              Model: {data.model}
              {data.model_context !== null ? ` (${data.model_context.toLocaleString('en-US')} tokens of context)` : ''}
            </span>
          </div>

          {warning && (
            <div className="banner warn" role="alert" data-testid="agent-too-small">
              {warning}
            </div>
          )}

          {data.shared && !made && (
            <div className="key-form">
              <button
                type="button"
                className="btn btn-primary"
                data-testid="agent-make-key"
                disabled={making}
                onClick={() => void makeKey()}
              >
                <PlusIcon />
                <span>{making ? 'Making a key…' : 'Make a key'}</span>
              </button>
              <span className="muted">
                The node is shared: the agent needs a key. <code>{data.key_placeholder}</code> stands where it goes.
              </span>
            </div>
          )}
          {keyError && (
            <p className="form-note error" role="alert" data-testid="agent-key-error">
              {keyError}
            </p>
          )}
          {made && (
            <div className="secret-box" role="status" data-testid="agent-key-made" data-key-id={made.key.id}>
              <p className="secret-warning">
                <strong>The key “{made.key.name}” is in the text below: copy it now, it will not be shown again.</strong>{' '}
                It uses the models only; revoke it under API keys.
              </p>
              <button
                type="button"
                className="icon-btn"
                data-testid="agent-key-dismiss"
                aria-label="Hide the key"
                title="Hide the key"
                onClick={() => setMade(null)}
              >
                <CloseIcon />
              </button>
            </div>
          )}

          <div className="code-block" data-testid="agent-settings">
            <div className="code-head">
              <span>{agent.name}</span>
              <button type="button" className="copy-code" data-testid="agent-copy" onClick={() => void copy()}>
                <CopyIcon /> {copied ? 'Copied' : 'Copy'}
              </button>
            </div>
            <pre>
              <code data-testid="agent-text">{text}</code>
            </pre>
          </div>
          {copied === false && (
            <p className="form-note error" role="alert">
              Copying failed: select the text and copy it by hand.
            </p>
          )}
        </>
      )}
      {!data && !error && <p className="muted">Reading the agents’ settings…</p>}
    </div>
  );
}
