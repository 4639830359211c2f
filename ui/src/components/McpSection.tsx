/**
 * Settings → Tools: the MCP servers whose tools the chat may use (`/api/mcp/*`). Owns the list
 * (read on open, again every few seconds while a server starts), which server is being edited
 * or added, and the always-allowed tools; each row, the form and the import box do their own
 * calls. Only the node's own machine may manage them: a 403 is said in words, like API keys.
 */
import { useCallback, useEffect, useState } from 'react';
import { ApiError, api, errorText } from '../api/client';
import type { McpServer, McpServerSpec } from '../api/mcpTypes';
import { emptyServerForm, toServerForm } from '../settings/mcpForm';
import { PlusIcon, RefreshIcon } from './icons';
import { McpAllowed } from './McpAllowed';
import { McpImport } from './McpImport';
import { McpServerFormView } from './McpServerForm';
import { McpServerRow } from './McpServerRow';
import './Mcp.css';

/** How often the list is read again while a server is starting. */
export const STARTING_POLL_MS = 2000;

/** `null`: no form; `''`: adding; a name: editing that server. */
type Editing = string | null;

export function McpSection() {
  const [servers, setServers] = useState<McpServer[] | null>(null);
  const [allowed, setAllowed] = useState<string[] | null>(null);
  const [forbidden, setForbidden] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [editing, setEditing] = useState<Editing>(null);

  const refresh = useCallback(async () => {
    try {
      const [list, always] = await Promise.all([api.mcpServers(), api.mcpAllowed()]);
      setServers(list);
      setAllowed(always);
      setError(null);
      setForbidden(false);
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) setForbidden(true);
      else setError(errorText(e));
    }
  }, []);

  useEffect(() => {
    void refresh();
  }, [refresh]);

  const starting = servers?.some((s) => s.status.state === 'starting') ?? false;
  useEffect(() => {
    if (!starting) return;
    const timer = setTimeout(() => void refresh(), STARTING_POLL_MS);
    return () => clearTimeout(timer);
  }, [starting, servers, refresh]);

  const replace = (server: McpServer) =>
    setServers((list) => (list ?? []).map((s) => (s.spec.name === server.spec.name ? server : s)));

  const add = async (spec: McpServerSpec) => {
    const server = await api.addMcpServer(spec);
    setServers((list) => [...(list ?? []).filter((s) => s.spec.name !== server.spec.name), server]);
    setEditing(null);
  };

  const save = async (spec: McpServerSpec) => {
    replace(await api.putMcpServer(spec.name, spec));
    setEditing(null);
  };

  if (forbidden) {
    return (
      <div className="card settings-card" data-testid="mcp-section">
        <h2>Tools</h2>
        <div className="banner warn" role="status" data-testid="mcp-forbidden">
          Tools (MCP servers) can only be managed on the machine that runs the node: open Settings there.
        </div>
      </div>
    );
  }

  return (
    <div className="card settings-card mcp-section" data-testid="mcp-section">
      <div className="mcp-section-head">
        <h2>Tools</h2>
        <button type="button" className="icon-btn" aria-label="Read the servers again" title="Read again" onClick={() => void refresh()}>
          <RefreshIcon />
        </button>
      </div>
      <p className="muted">
        MCP servers give the chat tools: reading files, searching, calling other programs. A server starts when a chat first
        needs it and stops when idle. Every call shows its arguments and waits for your consent, unless you allowed that
        tool. A tool's result is shown as text, never run.
      </p>

      {error && (
        <div className="banner error" role="alert" data-testid="mcp-error">
          {error}
        </div>
      )}

      {servers === null && !error && <p className="muted">Reading the servers…</p>}
      {servers && servers.length === 0 && editing !== '' && (
        <p className="muted" data-testid="mcp-empty">
          No servers yet.
        </p>
      )}
      {servers && servers.length > 0 && (
        <ul className="mcp-servers">
          {servers.map((server) =>
            editing === server.spec.name ? (
              <li key={server.spec.name} className="mcp-server">
                <McpServerFormView initial={toServerForm(server.spec)} editing onSubmit={save} onCancel={() => setEditing(null)} />
              </li>
            ) : (
              <McpServerRow
                key={server.spec.name}
                server={server}
                onChanged={replace}
                onRemoved={(name) => {
                  setServers((list) => (list ?? []).filter((s) => s.spec.name !== name));
                  setAllowed((a) => a && a.filter((t) => !t.startsWith(`${name}__`)));
                }}
                onEdit={() => setEditing(server.spec.name)}
                onToolsRead={() => void refresh()}
              />
            ),
          )}
        </ul>
      )}

      {editing === '' ? (
        <McpServerFormView initial={emptyServerForm()} editing={false} onSubmit={add} onCancel={() => setEditing(null)} />
      ) : (
        <button type="button" className="btn" data-testid="mcp-add" disabled={servers === null} onClick={() => setEditing('')}>
          <PlusIcon />
          <span>Add a server</span>
        </button>
      )}

      <McpImport onImported={() => void refresh()} />
      <McpAllowed tools={allowed} onRemoved={(tool) => setAllowed((a) => a && a.filter((t) => t !== tool))} />
    </div>
  );
}
