/**
 * Per-conversation generation settings: system prompt, temperature, top P, max tokens, and
 * whether the MCP servers' tools are offered (with the most tool steps one turn may take).
 */
import { useEffect, useState, type FormEvent } from 'react';
import type { Conversation, ConversationSettings, ToolChoice } from '../api/types';
import { parseForm, TEMPERATURE_MAX, TOOL_STEPS_MAX, TOOL_STEPS_MIN, toForm, type SettingsForm } from '../chat/settingsForm';
import { CloseIcon } from './icons';

export interface SettingsDrawerProps {
  conversation: Conversation;
  onSave: (settings: ConversationSettings) => Promise<void>;
  onClose: () => void;
}

export function SettingsDrawer({ conversation, onSave, onClose }: SettingsDrawerProps) {
  const [form, setForm] = useState<SettingsForm>(() => toForm(conversation.settings));
  const [message, setMessage] = useState<{ kind: 'ok' | 'error'; text: string } | null>(null);
  const [saving, setSaving] = useState(false);

  useEffect(() => {
    setForm(toForm(conversation.settings));
    setMessage(null);
    // Reset only when another conversation is shown, not after our own save.
  }, [conversation.id]);

  const set = (key: Exclude<keyof SettingsForm, 'tools' | 'tool_choice'>) => (value: string) => {
    setForm((f) => ({ ...f, [key]: value }));
    setMessage(null);
  };
  const setTools = (tools: boolean) => {
    setForm((f) => ({ ...f, tools }));
    setMessage(null);
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const parsed = parseForm(form);
    if (!parsed.ok) {
      setMessage({ kind: 'error', text: parsed.error });
      return;
    }
    setSaving(true);
    try {
      await onSave(parsed.settings);
      setMessage({ kind: 'ok', text: 'Saved. The next answer uses these settings.' });
    } catch (err) {
      setMessage({ kind: 'error', text: err instanceof Error ? err.message : String(err) });
    } finally {
      setSaving(false);
    }
  };

  return (
    <aside className="drawer" data-testid="settings-drawer" aria-label="Conversation settings">
      <form onSubmit={submit}>
        <div className="drawer-head">
          <h2>Settings</h2>
          <button type="button" className="icon-btn" onClick={onClose} aria-label="Close settings" data-testid="settings-close">
            <CloseIcon />
          </button>
        </div>
        <label className="field">
          <span>System prompt</span>
          <textarea
            data-testid="settings-system-prompt"
            rows={5}
            value={form.system_prompt}
            placeholder="You are a helpful assistant."
            onChange={(e) => set('system_prompt')(e.target.value)}
          />
        </label>
        <label className="field">
          <span>
            Temperature <output>{form.temperature}</output>
          </span>
          <div className="field-row">
            <input
              type="range"
              min={0}
              max={TEMPERATURE_MAX}
              step={0.05}
              value={Number(form.temperature) || 0}
              onChange={(e) => set('temperature')(e.target.value)}
              aria-label="Temperature slider"
            />
            <input
              type="number"
              data-testid="settings-temperature"
              min={0}
              max={TEMPERATURE_MAX}
              step={0.05}
              value={form.temperature}
              onChange={(e) => set('temperature')(e.target.value)}
            />
          </div>
        </label>
        <label className="field">
          <span>
            Top P <output>{form.top_p}</output>
          </span>
          <div className="field-row">
            <input
              type="range"
              min={0.01}
              max={1}
              step={0.01}
              value={Number(form.top_p) || 0}
              onChange={(e) => set('top_p')(e.target.value)}
              aria-label="Top P slider"
            />
            <input
              type="number"
              data-testid="settings-top-p"
              min={0.01}
              max={1}
              step={0.01}
              value={form.top_p}
              onChange={(e) => set('top_p')(e.target.value)}
            />
          </div>
        </label>
        <label className="field">
          <span>Max tokens</span>
          <input
            type="number"
            data-testid="settings-max-tokens"
            min={1}
            step={1}
            placeholder="No limit"
            value={form.max_tokens}
            onChange={(e) => set('max_tokens')(e.target.value)}
          />
        </label>
        <label className="field-check">
          <input
            type="checkbox"
            role="switch"
            data-testid="settings-tools"
            checked={form.tools}
            onChange={(e) => setTools(e.target.checked)}
          />
          <span>Use tools</span>
        </label>
        <p className="field-help muted">
          Offer the tools of the MCP servers switched on in Settings → Tools. Each call waits for your consent unless
          you allowed that tool.
        </p>
        <label className="field">
          <span>Tool steps</span>
          <input
            type="number"
            data-testid="settings-tool-steps"
            min={TOOL_STEPS_MIN}
            max={TOOL_STEPS_MAX}
            step={1}
            value={form.tool_steps}
            onChange={(e) => set('tool_steps')(e.target.value)}
          />
        </label>
        <p className="field-help muted">The most answers with tool calls one message may chain ({TOOL_STEPS_MIN}-{TOOL_STEPS_MAX}).</p>
        <label className="field">
          <span>Calling tools</span>
          <select
            data-testid="settings-tool-choice"
            value={form.tool_choice}
            onChange={(e) => {
              const tool_choice = e.target.value as ToolChoice;
              setForm((f) => ({ ...f, tool_choice }));
            }}
          >
            <option value="auto">When the model chooses</option>
            <option value="first">The first answer calls a tool</option>
            <option value="required">Every answer calls a tool</option>
          </select>
        </label>
        <p className="field-help muted">
          For a model that does not call tools on its own: its first answer to each message (or each of its answers, up
          to the step limit) is made a tool call.
        </p>
        {message && (
          <p className={`form-note ${message.kind}`} role={message.kind === 'error' ? 'alert' : 'status'} data-testid="settings-message">
            {message.text}
          </p>
        )}
        <div className="drawer-actions">
          <button type="submit" className="btn btn-primary" data-testid="settings-save" disabled={saving}>
            {saving ? 'Saving…' : 'Save'}
          </button>
        </div>
      </form>
    </aside>
  );
}
