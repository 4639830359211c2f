/**
 * One MCP tool call in an answer, as a card: server and tool, the arguments as pretty-printed
 * JSON (shown, never blurred, always open while the call waits), its state, and for a call that
 * waits the four consent buttons (Deny opens an optional reason). Its result via ToolOutcome.
 */
import { useState, type FormEvent } from 'react';
import type { ToolCall, ToolDecision } from '../api/mcpTypes';
import { CONSENT_LABEL, formatArguments, stateLabel } from '../chat/toolView';
import { ToolOutcomeView } from './ToolOutcome';

export interface ToolCallCardProps {
  call: ToolCall;
  /** A request is in flight in this conversation: the buttons wait. */
  disabled: boolean;
  onDecide: (callId: string, decision: ToolDecision, reason?: string) => void;
}

export function ToolCallCard({ call, disabled, onDecide }: ToolCallCardProps) {
  const pending = call.state === 'pending';
  const [expanded, setExpanded] = useState(pending || call.state === 'error');
  const open = expanded || pending;
  const consent = call.consent ? CONSENT_LABEL[call.consent] : null;
  return (
    <section
      className={`tool-call state-${call.state}`}
      data-testid="tool-call"
      data-call-id={call.id}
      data-state={call.state}
      aria-label={`Tool call ${call.server} ${call.tool}`}
    >
      <header className="tool-call-head">
        <button
          type="button"
          className="tool-call-toggle"
          aria-expanded={open}
          disabled={pending}
          onClick={() => setExpanded((e) => !e)}
          data-testid="tool-call-toggle"
        >
          <span className="tool-call-chevron" aria-hidden="true">
            {open ? '▾' : '▸'}
          </span>
          <span className="tool-call-server">{call.server}</span>
          <span className="tool-call-sep" aria-hidden="true">
            ›
          </span>
          <span className="tool-call-tool">{call.tool}</span>
        </button>
        <span className={`badge tool-state tool-state-${call.state}`} data-testid="tool-call-state">
          {stateLabel(call.state)}
        </span>
        {consent && <span className="muted tool-consent">{consent}</span>}
      </header>
      {open && (
        <div className="tool-call-body">
          <div className="tool-label">Arguments</div>
          <pre className="tool-args" data-testid="tool-call-args">
            {formatArguments(call.arguments)}
          </pre>
          {pending && <ConsentButtons call={call} disabled={disabled} onDecide={onDecide} />}
          {call.state === 'denied' && (
            <p className="tool-note" data-testid="tool-call-reason">
              {call.reason ? `Denied: ${call.reason}` : 'Denied.'}
            </p>
          )}
          {call.error && (
            <p className="tool-call-error" role="alert" data-testid="tool-call-error">
              {call.error}
            </p>
          )}
          {call.outcome && (
            <>
              <div className="tool-label">Result</div>
              <ToolOutcomeView outcome={call.outcome} />
            </>
          )}
        </div>
      )}
    </section>
  );
}

function ConsentButtons({ call, disabled, onDecide }: ToolCallCardProps) {
  const [denying, setDenying] = useState(false);
  const [reason, setReason] = useState('');
  const deny = (e: FormEvent) => {
    e.preventDefault();
    onDecide(call.id, 'deny', reason);
  };
  if (denying) {
    return (
      <form className="tool-deny" onSubmit={deny} data-testid="tool-deny-form">
        <label className="field">
          <span>Why not? (optional: the model is told)</span>
          <input
            className="text-input"
            data-testid="tool-deny-reason"
            value={reason}
            autoFocus
            maxLength={2000}
            placeholder="e.g. Do not touch that folder"
            onChange={(e) => setReason(e.target.value)}
          />
        </label>
        <div className="tool-actions">
          <button type="submit" className="btn btn-danger" data-testid="tool-deny-confirm" disabled={disabled}>
            Deny
          </button>
          <button type="button" className="btn" onClick={() => setDenying(false)} disabled={disabled}>
            Back
          </button>
        </div>
      </form>
    );
  }
  return (
    <div className="tool-actions" role="group" aria-label="Allow this call?">
      <button type="button" className="btn btn-primary" data-testid="tool-allow-once" disabled={disabled} onClick={() => onDecide(call.id, 'once')}>
        Allow once
      </button>
      <button
        type="button"
        className="btn"
        data-testid="tool-allow-chat"
        disabled={disabled}
        title={`Run ${call.name} without asking for the rest of this conversation`}
        onClick={() => onDecide(call.id, 'chat')}
      >
        Allow for this chat
      </button>
      <button
        type="button"
        className="btn"
        data-testid="tool-allow-always"
        disabled={disabled}
        title={`Never ask again for ${call.name} (Settings → Tools lists it, to take it back)`}
        onClick={() => onDecide(call.id, 'always')}
      >
        Always allow this tool
      </button>
      <button type="button" className="btn btn-danger" data-testid="tool-deny" disabled={disabled} onClick={() => setDenying(true)}>
        Deny
      </button>
    </div>
  );
}
