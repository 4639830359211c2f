/**
 * The add/edit form of one MCP server: a command (arguments, env entries, working folder) run on
 * this machine, or a URL (headers). Env and header values are typed into password inputs, shown
 * only on request. Checks the form (settings/mcpForm.ts) and hands the spec to its caller.
 */
import { useState, type FormEvent } from 'react';
import type { McpServerSpec } from '../api/mcpTypes';
import { errorText } from '../api/client';
import { parseServerForm, SERVER_NAME_MAX, type Entry, type McpServerForm } from '../settings/mcpForm';
import { CloseIcon, PlusIcon } from './icons';

export interface McpServerFormProps {
  initial: McpServerForm;
  /** Editing keeps the name (the node's PUT names the server). */
  editing: boolean;
  onSubmit: (spec: McpServerSpec) => Promise<void>;
  onCancel: () => void;
}

export function McpServerFormView({ initial, editing, onSubmit, onCancel }: McpServerFormProps) {
  const [form, setForm] = useState<McpServerForm>(initial);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);

  const change = (patch: Partial<McpServerForm>) => {
    setForm((f) => ({ ...f, ...patch }));
    setError(null);
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const parsed = parseServerForm(form);
    if (!parsed.ok) {
      setError(parsed.error);
      return;
    }
    setSaving(true);
    try {
      await onSubmit(parsed.spec);
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };

  return (
    <form className="mcp-form" data-testid="mcp-form" onSubmit={(e) => void submit(e)}>
      <h3>{editing ? `Edit ${initial.name}` : 'Add a server'}</h3>
      <fieldset className="mcp-kind" disabled={editing}>
        <legend className="visually-hidden">Kind of server</legend>
        <label>
          <input
            type="radio"
            name="mcp-kind"
            data-testid="mcp-kind-stdio"
            checked={form.kind === 'stdio'}
            onChange={() => change({ kind: 'stdio' })}
          />{' '}
          A command on this computer
        </label>
        <label>
          <input
            type="radio"
            name="mcp-kind"
            data-testid="mcp-kind-http"
            checked={form.kind === 'http'}
            onChange={() => change({ kind: 'http' })}
          />{' '}
          A server at a URL
        </label>
      </fieldset>

      <label className="field">
        <span>Name</span>
        <input
          className="text-input"
          data-testid="mcp-name"
          value={form.name}
          maxLength={SERVER_NAME_MAX}
          disabled={editing}
          placeholder="e.g. files"
          autoComplete="off"
          onChange={(e) => change({ name: e.target.value })}
        />
      </label>

      {form.kind === 'stdio' ? (
        <>
          <p className="banner warn mcp-warning" data-testid="mcp-command-warning">
            The command runs on this computer with your user's rights: it can read, change and send anything you can.
            Add only servers you trust.
          </p>
          <label className="field">
            <span>Command</span>
            <input
              className="text-input mono"
              data-testid="mcp-command"
              value={form.command}
              placeholder="e.g. npx"
              autoComplete="off"
              spellCheck={false}
              onChange={(e) => change({ command: e.target.value })}
            />
          </label>
          <label className="field">
            <span>Arguments, one per line</span>
            <textarea
              className="text-input mono"
              data-testid="mcp-args"
              rows={Math.min(8, Math.max(3, form.args.split('\n').length))}
              value={form.args}
              placeholder={'-y\n@modelcontextprotocol/server-filesystem\n/home/me/notes'}
              spellCheck={false}
              onChange={(e) => change({ args: e.target.value })}
            />
          </label>
          <EntriesEditor
            label="Environment variables"
            keyLabel="Variable"
            addLabel="Add a variable"
            testId="mcp-env"
            rows={form.env}
            onChange={(env) => change({ env })}
          />
          <label className="field">
            <span>Working folder (optional)</span>
            <input
              className="text-input mono"
              data-testid="mcp-cwd"
              value={form.cwd}
              placeholder="Empty: the node's own"
              autoComplete="off"
              spellCheck={false}
              onChange={(e) => change({ cwd: e.target.value })}
            />
          </label>
        </>
      ) : (
        <>
          <label className="field">
            <span>URL (streamable HTTP)</span>
            <input
              className="text-input mono"
              data-testid="mcp-url"
              type="url"
              value={form.url}
              placeholder="e.g. https://example.com/mcp"
              autoComplete="off"
              spellCheck={false}
              onChange={(e) => change({ url: e.target.value })}
            />
          </label>
          <EntriesEditor
            label="Headers"
            keyLabel="Header"
            addLabel="Add a header"
            testId="mcp-headers"
            rows={form.headers}
            onChange={(headers) => change({ headers })}
          />
        </>
      )}

      <label className="field mcp-timeout">
        <span>Call timeout (seconds)</span>
        <input
          type="number"
          className="text-input"
          data-testid="mcp-timeout"
          min={1}
          step={1}
          value={form.timeout_s}
          onChange={(e) => change({ timeout_s: e.target.value })}
        />
      </label>

      {error && (
        <p className="form-note error" role="alert" data-testid="mcp-form-error">
          {error}
        </p>
      )}
      <div className="form-actions mcp-form-actions">
        <button type="button" className="btn" onClick={onCancel} disabled={saving}>
          Cancel
        </button>
        <button type="submit" className="btn btn-primary" data-testid="mcp-save" disabled={saving}>
          {saving ? 'Saving…' : editing ? 'Save' : 'Add server'}
        </button>
      </div>
    </form>
  );
}

interface EntriesEditorProps {
  label: string;
  keyLabel: string;
  addLabel: string;
  testId: string;
  rows: Entry[];
  onChange: (rows: Entry[]) => void;
}

/** Name/value rows; values in password inputs, each shown only while its "Show" is on. */
function EntriesEditor({ label, keyLabel, addLabel, testId, rows, onChange }: EntriesEditorProps) {
  const [shown, setShown] = useState<Set<number>>(() => new Set());
  const set = (i: number, patch: Partial<Entry>) => onChange(rows.map((r, j) => (j === i ? { ...r, ...patch } : r)));
  const remove = (i: number) => {
    onChange(rows.filter((_, j) => j !== i));
    setShown(new Set());
  };
  const toggle = (i: number) =>
    setShown((s) => {
      const next = new Set(s);
      if (!next.delete(i)) next.add(i);
      return next;
    });
  return (
    <div className="field mcp-entries" data-testid={testId}>
      <span>{label}</span>
      {rows.map((row, i) => (
        <div className="mcp-entry" key={i} data-testid={`${testId}-row`}>
          <input
            className="text-input mono"
            aria-label={`${keyLabel} name`}
            placeholder={keyLabel === 'Header' ? 'Authorization' : 'API_KEY'}
            value={row.key}
            autoComplete="off"
            spellCheck={false}
            onChange={(e) => set(i, { key: e.target.value })}
          />
          <input
            className="text-input mono"
            type={shown.has(i) ? 'text' : 'password'}
            aria-label={`${keyLabel} value`}
            placeholder="value"
            value={row.value}
            autoComplete="new-password"
            spellCheck={false}
            data-testid={`${testId}-value`}
            onChange={(e) => set(i, { value: e.target.value })}
          />
          <button type="button" className="btn" aria-pressed={shown.has(i)} onClick={() => toggle(i)}>
            {shown.has(i) ? 'Hide' : 'Show'}
          </button>
          <button type="button" className="icon-btn" aria-label={`Remove this ${keyLabel.toLowerCase()}`} onClick={() => remove(i)}>
            <CloseIcon />
          </button>
        </div>
      ))}
      <div>
        <button type="button" className="btn" onClick={() => onChange([...rows, { key: '', value: '' }])}>
          <PlusIcon />
          <span>{addLabel}</span>
        </button>
      </div>
    </div>
  );
}
