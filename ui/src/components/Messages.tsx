/**
 * The message list of one conversation: user bubbles (their images and audio clips, plain text editable inline) and
 * answers (a reasoning model's thinking folded above the Markdown answer, streaming caret,
 * its MCP tool calls as cards, status badge, stats, regenerate), with the stream's notices
 * inline. Stays scrolled to the bottom while an answer grows, unless the user scrolled up to read.
 */
import { Fragment, useEffect, useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react';
import type { ToolDecision } from '../api/mcpTypes';
import type { Message, MessageStats } from '../api/types';
import type { Notice } from '../chat/thread';
import { splitThinking } from '../chat/thinking';
import { copyText } from '../clipboard';
import { formatMs, formatNumber } from '../format';
import { CopyIcon, PencilIcon, RefreshIcon } from './icons';
import { Markdown } from './Markdown';
import { MessageAudio } from './MessageAudio';
import { MessageImages } from './MessageImages';
import { SourcesList } from './SourcesList';
import { ToolCallCard } from './ToolCallCard';
import { TypingDots } from './TypingDots';
import './Messages.css';
import './ToolCalls.css';

/** Closer to the bottom than this (px) counts as "at the bottom". */
const STICK_THRESHOLD_PX = 80;

export interface MessageListProps {
  conversationId: string;
  messages: Message[];
  /** The stream's notices, each shown after the message it followed. */
  notices?: Notice[];
  /** An answer is streaming or a request is in flight: no edits or regenerate now. */
  busy: boolean;
  /** A request of this client is in flight: consent buttons wait. */
  sending?: boolean;
  onRegenerate: () => void;
  onEdit: (messageId: string, content: string) => void;
  onDecide?: (callId: string, decision: ToolDecision, reason?: string) => void;
}

export function MessageList({
  conversationId,
  messages,
  notices = [],
  busy,
  sending = false,
  onRegenerate,
  onEdit,
  onDecide = () => undefined,
}: MessageListProps) {
  const ref = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  const [editing, setEditing] = useState<string | null>(null);

  useEffect(() => {
    stick.current = true;
    setEditing(null);
  }, [conversationId]);

  useLayoutEffect(() => {
    const el = ref.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [messages, notices]);

  const onScroll = () => {
    const el = ref.current;
    if (el) stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < STICK_THRESHOLD_PX;
  };

  const last = messages[messages.length - 1];
  return (
    <div className="messages" ref={ref} onScroll={onScroll} data-testid="messages">
      <div className="messages-inner">
        {noticesAfter(notices, null)}
        {messages.map((m) => (
          <Fragment key={m.id}>
            {m.role === 'user' ? (
              <UserBubble
                message={m}
                editing={editing === m.id}
                canEdit={!busy && !m.id.startsWith('local_')}
                onStartEdit={() => setEditing(m.id)}
                onCancel={() => setEditing(null)}
                onSubmit={(content) => {
                  setEditing(null);
                  onEdit(m.id, content);
                }}
              />
            ) : (
              <AnswerBubble
                message={m}
                canRegenerate={!busy && m === last}
                onRegenerate={onRegenerate}
                deciding={sending}
                onDecide={onDecide}
              />
            )}
            {noticesAfter(notices, m.id)}
          </Fragment>
        ))}
        {last && last.role === 'user' && !busy && !last.id.startsWith('local_') && (
          <div className="retry">
            <span className="muted">No answer yet.</span>
            <button type="button" className="btn" data-testid="retry-button" onClick={onRegenerate}>
              <RefreshIcon />
              Generate an answer
            </button>
          </div>
        )}
      </div>
    </div>
  );
}

interface UserBubbleProps {
  message: Message;
  editing: boolean;
  canEdit: boolean;
  onStartEdit: () => void;
  onCancel: () => void;
  onSubmit: (content: string) => void;
}

function UserBubble({ message, editing, canEdit, onStartEdit, onCancel, onSubmit }: UserBubbleProps) {
  const [draft, setDraft] = useState(message.content);
  const area = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    if (editing) {
      setDraft(message.content);
      requestAnimationFrame(() => area.current?.focus());
    }
  }, [editing, message.content]);

  const submit = () => {
    if (draft.trim()) onSubmit(draft);
  };
  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
      e.preventDefault();
      submit();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      onCancel();
    }
  };

  return (
    <article className="msg msg-user" data-testid="user-message" data-message-id={message.id} data-status={message.status}>
      {editing ? (
        <div className="edit-box">
          <textarea
            ref={area}
            data-testid="edit-input"
            value={draft}
            rows={Math.min(10, Math.max(2, draft.split('\n').length))}
            onChange={(e) => setDraft(e.target.value)}
            onKeyDown={onKeyDown}
            aria-label="Edit message"
          />
          <div className="edit-actions">
            <button type="button" className="btn" data-testid="edit-cancel" onClick={onCancel}>
              Cancel
            </button>
            <button type="button" className="btn btn-primary" data-testid="edit-save" onClick={submit} disabled={!draft.trim()}>
              Save &amp; send
            </button>
          </div>
        </div>
      ) : (
        <>
          <MessageImages images={message.images ?? []} />
          <MessageAudio clips={message.audio ?? []} />
          {message.content && (
            <div className="bubble" data-testid="message-content">
              {message.content}
            </div>
          )}
          <div className="msg-actions">
            <button type="button" className="icon-btn" title="Copy" aria-label="Copy message" onClick={() => void copyText(message.content)}>
              <CopyIcon />
            </button>
            <button
              type="button"
              className="icon-btn"
              data-testid="edit-button"
              title="Edit and resend"
              aria-label="Edit and resend"
              disabled={!canEdit}
              onClick={onStartEdit}
            >
              <PencilIcon />
            </button>
          </div>
        </>
      )}
    </article>
  );
}

const STATUS_LABEL: Partial<Record<Message['status'], string>> = {
  stopped: 'Stopped',
  interrupted: 'Interrupted',
  error: 'Error',
};

/** The notices that came after message `after` (null: before any message). */
function noticesAfter(notices: Notice[], after: string | null) {
  return notices
    .filter((n) => n.after === after)
    .map((n) => (
      <p key={n.id} className="chat-notice" role="status" data-testid="chat-notice">
        {n.text}
      </p>
    ));
}

interface AnswerBubbleProps {
  message: Message;
  canRegenerate: boolean;
  onRegenerate: () => void;
  deciding: boolean;
  onDecide: (callId: string, decision: ToolDecision, reason?: string) => void;
}

function AnswerBubble({ message, canRegenerate, onRegenerate, deciding, onDecide }: AnswerBubbleProps) {
  const streaming = message.status === 'streaming';
  const { thinking, answer, open } = splitThinking(message.content, streaming);
  const badge = STATUS_LABEL[message.status];
  const stats = message.stats;
  return (
    <article
      className={`msg msg-assistant${streaming ? ' is-streaming' : ''}`}
      data-testid="answer"
      data-message-id={message.id}
      data-status={message.status}
      aria-busy={streaming}
    >
      {thinking !== null && (
        <details className="thinking" data-testid="thinking" data-open={open}>
          <summary>{open && streaming ? 'Thinking…' : 'Thought'}</summary>
          <div className="thinking-body" data-testid="thinking-content">
            {thinking}
          </div>
        </details>
      )}
      <div className="answer-body">
        {answer === '' && streaming ? (
          <TypingDots />
        ) : (
          <Markdown text={answer} streaming={streaming} />
        )}
      </div>
      {message.tool_calls && message.tool_calls.length > 0 && (
        <div className="tool-calls" data-testid="tool-calls">
          {message.tool_calls.map((call) => (
            <ToolCallCard key={call.id} call={call} disabled={deciding} onDecide={onDecide} />
          ))}
        </div>
      )}
      {message.sources && <SourcesList sources={message.sources} />}
      {message.status === 'error' && message.error && (
        <div className="answer-error" role="alert" data-testid="answer-error">
          {message.error}
        </div>
      )}
      <footer className="answer-meta">
        {badge && (
          <span className={`badge badge-${message.status}`} data-testid="status-badge" title={badgeTitle(message)}>
            {badge}
          </span>
        )}
        {stats && (
          <span className="stats" data-testid="answer-stats">
            <span data-testid="stat-tokens">{stats.tokens} tokens</span>
            <span data-testid="stat-tps">{formatNumber(stats.tokens_per_s)} tok/s</span>
            <span data-testid="stat-ttft" title={ttftTitle(stats)}>
              TTFT {formatMs(stats.ttft_ms)}
            </span>
          </span>
        )}
        {(message.model || message.node) && (
          <span className="stats provenance">
            {message.model && <span data-testid="stat-model">{message.model}</span>}
            {message.node && <span data-testid="stat-node">on {message.node}</span>}
          </span>
        )}
        <span className="answer-actions">
          {!streaming && (
            <button type="button" className="icon-btn" title="Copy" aria-label="Copy answer" onClick={() => void copyText(answer)}>
              <CopyIcon />
            </button>
          )}
          {canRegenerate && (
            <button
              type="button"
              className="icon-btn"
              data-testid="regenerate-button"
              title="Regenerate"
              aria-label="Regenerate"
              onClick={onRegenerate}
            >
              <RefreshIcon />
            </button>
          )}
        </span>
      </footer>
    </article>
  );
}

function badgeTitle(message: Message): string {
  switch (message.status) {
    case 'stopped':
      return 'You stopped this answer.';
    case 'interrupted':
      return 'This answer was cut short: the window closed or the node stopped while it was written.';
    case 'error':
      return message.error ?? 'The generation failed.';
    default:
      return '';
  }
}

/** The time to first token, with the prompt it read when the node says (how much was new). */
function ttftTitle(stats: MessageStats): string {
  if (!stats.prompt_tokens) return 'Time to first token';
  return `Time to first token: a prompt of ${stats.prompt_tokens} tokens, ${stats.cached_tokens ?? 0} of them kept from before`;
}
