/**
 * One MCP server in Settings → Tools: its name, command or URL, status (with a failure's
 * reason), the on/off switch, edit, remove (confirmed inline), and two panels opened on
 * request: its tools (each with a switch that PUTs the spec's `disabled_tools`) and its log.
 */
import { useCallback, useEffect, useRef, useState } from 'react';
import { api, errorText } from '../api/client';
import type { McpServer, McpServerSpec, McpTool } from '../api/mcpTypes';
import { formatDateTime } from '../format';
import { statusText, transportText, withToolEnabled } from '../settings/mcpView';
import { CloseIcon, PencilIcon, RefreshIcon } from './icons';

export interface McpServerRowProps {
  server: McpServer;
  /** The node answered a change with the server's new state. */
  onChanged: (server: McpServer) => void;
  onRemoved: (name: string) => void;
  onEdit: () => void;
  /** Its tools were asked for, which starts a stopped server: its status is worth reading again. */
  onToolsRead: () => void;
}

type Panel = 'tools' | 'log' | null;

export function McpServerRow({ server, onChanged, onRemoved, onEdit, onToolsRead }: McpServerRowProps) {
  const { spec, status } = server;
  const [panel, setPanel] = useState<Panel>(null);
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const put = async (next: McpServerSpec): Promise<boolean> => {
    setBusy(true);
    setError(null);
    try {
      onChanged(await api.putMcpServer(spec.name, next));
      return true;
    } catch (e) {
      setError(errorText(e));
      return false;
    } finally {
      setBusy(false);
    }
  };

  const remove = async () => {
    setConfirming(false);
    setBusy(true);
    setError(null);
    try {
      await api.removeMcpServer(spec.name);
      onRemoved(spec.name);
    } catch (e) {
      setError(errorText(e));
      setBusy(false);
    }
  };

  const toggle = (p: Exclude<Panel, null>) => setPanel((open) => (open === p ? null : p));

  return (
    <li className={`mcp-server state-${status.state}`} data-testid="mcp-server" data-name={spec.name} data-state={status.state}>
      <div className="mcp-server-head">
        <label className="mcp-switch" title={spec.enabled ? 'On: its tools are offered to the model' : 'Off'}>
          <input
            type="checkbox"
            role="switch"
            data-testid="mcp-enabled"
            aria-label={`${spec.name} on`}
            checked={spec.enabled}
            disabled={busy}
            onChange={(e) => void put({ ...spec, enabled: e.target.checked })}
          />
        </label>
        <div className="mcp-server-main">
          <div className="mcp-server-title">
            <strong className="mcp-server-name">{spec.name}</strong>
            <span className={`badge mcp-state mcp-state-${status.state}`} data-testid="mcp-status">
              {status.state === 'failed' ? 'Failed' : statusText(status)}
            </span>
            <span className="muted mcp-kind-label">{spec.transport.type === 'stdio' ? 'command' : 'URL'}</span>
          </div>
          <code className="mcp-transport" title={transportText(spec)}>
            {transportText(spec)}
          </code>
          {status.state === 'failed' && (
            <p className="form-note error mcp-failure" data-testid="mcp-failure" title={formatDateTime(status.at_unix_ms)}>
              {status.error}
            </p>
          )}
        </div>
        <div className="mcp-server-actions">
          <button type="button" className="btn" aria-expanded={panel === 'tools'} data-testid="mcp-tools-toggle" onClick={() => toggle('tools')}>
            Tools
          </button>
          <button type="button" className="btn" aria-expanded={panel === 'log'} data-testid="mcp-log-toggle" onClick={() => toggle('log')}>
            Log
          </button>
          <button type="button" className="icon-btn" aria-label={`Edit ${spec.name}`} title="Edit" data-testid="mcp-edit" onClick={onEdit}>
            <PencilIcon />
          </button>
          {confirming ? (
            <span className="confirm-inline" role="alertdialog" aria-label={`Remove ${spec.name}?`}>
              <span>Remove it and the consent given to its tools?</span>
              <button type="button" className="btn btn-danger" data-testid="mcp-remove-confirm" onClick={() => void remove()}>
                Remove
              </button>
              <button type="button" className="icon-btn" aria-label="Cancel" onClick={() => setConfirming(false)}>
                <CloseIcon />
              </button>
            </span>
          ) : (
            <button type="button" className="btn" data-testid="mcp-remove" disabled={busy} onClick={() => setConfirming(true)}>
              Remove
            </button>
          )}
        </div>
      </div>
      {error && (
        <p className="form-note error" role="alert" data-testid="mcp-server-error">
          {error}
        </p>
      )}
      {panel === 'tools' && (
        <ToolsPanel spec={spec} busy={busy} onSwitch={(tool, on) => put(withToolEnabled(spec, tool, on))} onRead={onToolsRead} />
      )}
      {panel === 'log' && <LogPanel name={spec.name} />}
    </li>
  );
}

interface ToolsPanelProps {
  spec: McpServerSpec;
  busy: boolean;
  onSwitch: (tool: string, enabled: boolean) => Promise<boolean>;
  /** The node answered the request for the tools (with them or with why not). */
  onRead: () => void;
}

/** The server's tools (asking for them starts it if it must). */
function ToolsPanel({ spec, busy, onSwitch, onRead }: ToolsPanelProps) {
  const [tools, setTools] = useState<McpTool[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(false);

  // A ref, so that a new callback from the parent does not read the tools again.
  const read = useRef(onRead);
  read.current = onRead;
  const load = useCallback(async () => {
    setLoading(true);
    setError(null);
    try {
      setTools(await api.mcpTools(spec.name));
    } catch (e) {
      setError(errorText(e));
    } finally {
      setLoading(false);
      read.current();
    }
  }, [spec.name]);

  useEffect(() => {
    void load();
  }, [load]);

  const off = new Set(spec.disabled_tools ?? []);
  return (
    <div className="mcp-panel" data-testid="mcp-tools">
      <div className="mcp-panel-head">
        <span>Tools</span>
        <button type="button" className="icon-btn" aria-label="Read the tools again" title="Read again" onClick={() => void load()}>
          <RefreshIcon />
        </button>
      </div>
      {loading && !tools && <p className="muted">Starting the server and asking for its tools…</p>}
      {error && (
        <p className="form-note error" role="alert" data-testid="mcp-tools-error">
          {error}
        </p>
      )}
      {tools && tools.length === 0 && <p className="muted">This server offers no tools.</p>}
      {tools && tools.length > 0 && (
        <ul className="mcp-tools">
          {tools.map((t) => (
            <li key={t.name} data-testid="mcp-tool" data-tool={t.name}>
              <label className="mcp-switch">
                <input
                  type="checkbox"
                  role="switch"
                  aria-label={`Offer ${t.name}`}
                  data-testid="mcp-tool-enabled"
                  checked={!off.has(t.name)}
                  disabled={busy}
                  onChange={(e) => void onSwitch(t.name, e.target.checked)}
                />
              </label>
              <div>
                <code className="mcp-tool-name">{t.name}</code>
                {t.title && t.title !== t.name && <span className="mcp-tool-title"> {t.title}</span>}
                {t.description && <p className="muted mcp-tool-description">{t.description}</p>}
              </div>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** The server's last stderr lines, as text. */
function LogPanel({ name }: { name: string }) {
  const [lines, setLines] = useState<string[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  const load = useCallback(async () => {
    setError(null);
    try {
      setLines(await api.mcpLog(name));
    } catch (e) {
      setError(errorText(e));
    }
  }, [name]);

  useEffect(() => {
    void load();
  }, [load]);

  return (
    <div className="mcp-panel" data-testid="mcp-log">
      <div className="mcp-panel-head">
        <span>Log (the server's error output)</span>
        <button type="button" className="icon-btn" aria-label="Read the log again" title="Read again" onClick={() => void load()}>
          <RefreshIcon />
        </button>
      </div>
      {error && (
        <p className="form-note error" role="alert">
          {error}
        </p>
      )}
      {lines && lines.length === 0 && <p className="muted">Nothing written yet.</p>}
      {lines && lines.length > 0 && <pre className="mcp-log-text">{lines.join('\n')}</pre>}
    </div>
  );
}
