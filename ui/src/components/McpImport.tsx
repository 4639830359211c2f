/**
 * The import box of Settings → Tools: the `mcpServers` JSON of Claude Desktop, LM Studio or Jan,
 * pasted or named by its file path, sent to `POST /api/mcp/import`; then what was added and what
 * was skipped, with the node's reason for each.
 */
import { useState, type FormEvent } from 'react';
import { api, errorText } from '../api/client';
import type { McpImportResult } from '../api/mcpTypes';
import { importBody } from '../settings/mcpView';

export interface McpImportProps {
  /** Servers were added: the list should be read again. */
  onImported: () => void;
}

export function McpImport({ onImported }: McpImportProps) {
  const [json, setJson] = useState('');
  const [path, setPath] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [result, setResult] = useState<McpImportResult | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const body = importBody(json, path);
    if (!body.ok) {
      setError(body.error);
      return;
    }
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      const answer = await api.importMcp(body.body);
      setResult(answer);
      if (answer.added.length > 0) {
        setJson('');
        setPath('');
        onImported();
      }
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form className="mcp-import" data-testid="mcp-import" onSubmit={(e) => void submit(e)}>
      <h3>Import from another app</h3>
      <p className="muted">
        Paste the <code>mcpServers</code> JSON of Claude Desktop (<code>claude_desktop_config.json</code>), LM Studio (
        <code>mcp.json</code>) or Jan, or give the path of that file on this computer. A name already here is skipped.
        Imported commands run on this computer with your user's rights once they are used.
      </p>
      <label className="field">
        <span>JSON</span>
        <textarea
          className="text-input mono"
          data-testid="mcp-import-json"
          rows={5}
          spellCheck={false}
          placeholder={'{"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]}}}'}
          value={json}
          onChange={(e) => {
            setJson(e.target.value);
            setError(null);
          }}
        />
      </label>
      <label className="field">
        <span>or a file path</span>
        <input
          className="text-input mono"
          data-testid="mcp-import-path"
          spellCheck={false}
          autoComplete="off"
          placeholder="/home/me/.lmstudio/mcp.json"
          value={path}
          onChange={(e) => {
            setPath(e.target.value);
            setError(null);
          }}
        />
      </label>
      <div className="form-actions">
        <button type="submit" className="btn btn-primary" data-testid="mcp-import-submit" disabled={busy}>
          {busy ? 'Importing…' : 'Import'}
        </button>
      </div>
      {error && (
        <p className="form-note error" role="alert" data-testid="mcp-import-error">
          {error}
        </p>
      )}
      {result && <McpImportResultView result={result} />}
    </form>
  );
}

/** What an import did: the servers added, and each skipped one with its reason. */
export function McpImportResultView({ result }: { result: McpImportResult }) {
  const { added, skipped } = result;
  return (
    <div className="mcp-import-result" role="status" data-testid="mcp-import-result">
      {added.length === 0 && skipped.length === 0 && <p className="muted">The JSON names no servers.</p>}
      {added.length > 0 && (
        <p className="form-note ok" data-testid="mcp-import-added">
          Added {added.length === 1 ? 'one server' : `${added.length} servers`}: {added.join(', ')}. They start when a chat
          first needs them.
        </p>
      )}
      {skipped.length > 0 && (
        <>
          <p className="form-note warn">
            Skipped {skipped.length === 1 ? 'one server' : `${skipped.length} servers`}:
          </p>
          <ul className="mcp-skipped" data-testid="mcp-import-skipped">
            {skipped.map((s, i) => (
              <li key={`${s.name}-${i}`} data-name={s.name}>
                <code>{s.name}</code>: {s.reason}
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
