/**
 * The tools allowed for good ("Always allow this tool" in the chat), from `GET /api/mcp/allowed`,
 * each with a button that stops allowing it (its next call asks again).
 */
import { useState } from 'react';
import { api, errorText } from '../api/client';

export interface McpAllowedProps {
  /** `server__tool` names; null while they are read. */
  tools: string[] | null;
  onRemoved: (tool: string) => void;
}

export function McpAllowed({ tools, onRemoved }: McpAllowedProps) {
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  const remove = async (tool: string) => {
    setBusy(tool);
    setError(null);
    try {
      await api.forgetMcpAllowed(tool);
      onRemoved(tool);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(null);
    }
  };

  return (
    <div className="mcp-allowed" data-testid="mcp-allowed">
      <h3>Always allowed</h3>
      <p className="muted">These tools run without asking, in every chat. Remove one and its next call asks again.</p>
      {error && (
        <p className="form-note error" role="alert">
          {error}
        </p>
      )}
      {tools === null ? (
        <p className="muted">Reading…</p>
      ) : tools.length === 0 ? (
        <p className="muted" data-testid="mcp-allowed-empty">
          None: every call asks first, unless allowed for its chat.
        </p>
      ) : (
        <ul className="mcp-allowed-list">
          {tools.map((tool) => (
            <li key={tool} data-testid="mcp-allowed-tool" data-tool={tool}>
              <code>{tool}</code>
              <button
                type="button"
                className="btn"
                data-testid="mcp-allowed-remove"
                disabled={busy === tool}
                onClick={() => void remove(tool)}
              >
                {busy === tool ? 'Removing…' : 'Remove'}
              </button>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
