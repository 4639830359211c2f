/**
 * The conversation list: new chat, search (the node matches titles and message text), and per
 * item inline rename (Enter saves, Esc cancels) and delete with an inline confirmation.
 */
import { useEffect, useRef, useState, type KeyboardEvent } from 'react';
import type { Conversation } from '../api/types';
import { formatRoute } from '../route';
import { formatBytes } from '../format';
import { CloseIcon, PencilIcon, PlusIcon, SearchIcon, TrashIcon } from './icons';

export interface SidebarProps {
  conversations: Conversation[];
  loaded: boolean;
  error: string | null;
  selectedId: string | null;
  query: string;
  onQuery: (q: string) => void;
  onNew: () => void;
  onRename: (id: string, title: string) => Promise<void>;
  onDelete: (id: string) => Promise<void>;
}

export function Sidebar(props: SidebarProps) {
  const { conversations, loaded, error, selectedId, query, onQuery, onNew } = props;
  return (
    <nav className="sidebar" aria-label="Conversations">
      <div className="sidebar-top">
        <button type="button" className="btn btn-primary new-chat" data-testid="new-chat" onClick={onNew}>
          <PlusIcon />
          <span>New chat</span>
        </button>
        <label className="search">
          <SearchIcon />
          <input
            type="search"
            data-testid="conversation-search"
            placeholder="Search chats"
            aria-label="Search conversations"
            value={query}
            onChange={(e) => onQuery(e.target.value)}
          />
        </label>
      </div>
      {error && (
        <p className="sidebar-note error" role="alert">
          {error}
        </p>
      )}
      <ul className="conversation-list" data-testid="conversation-list">
        {conversations.map((c) => (
          <ConversationItem
            key={c.id}
            conversation={c}
            selected={c.id === selectedId}
            onRename={props.onRename}
            onDelete={props.onDelete}
          />
        ))}
      </ul>
      {loaded && !error && conversations.length === 0 && (
        <p className="sidebar-note" data-testid="conversation-empty">
          {query ? 'No chat matches.' : 'No chats yet.'}
        </p>
      )}
    </nav>
  );
}

interface ItemProps {
  conversation: Conversation;
  selected: boolean;
  onRename: (id: string, title: string) => Promise<void>;
  onDelete: (id: string) => Promise<void>;
}

function ConversationItem({ conversation, selected, onRename, onDelete }: ItemProps) {
  const [mode, setMode] = useState<'view' | 'rename' | 'confirm'>('view');
  const [draft, setDraft] = useState(conversation.title);
  const input = useRef<HTMLInputElement>(null);

  useEffect(() => {
    if (mode === 'rename') {
      input.current?.focus();
      input.current?.select();
    }
  }, [mode]);

  const startRename = () => {
    setDraft(conversation.title);
    setMode('rename');
  };
  const commit = async () => {
    const title = draft.trim();
    setMode('view');
    if (title && title !== conversation.title) await onRename(conversation.id, title);
  };
  const onKeyDown = (e: KeyboardEvent<HTMLInputElement>) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      void commit();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      setMode('view');
    }
  };

  return (
    <li
      className={`conversation${selected ? ' selected' : ''}`}
      data-testid="conversation-item"
      data-conversation-id={conversation.id}
      aria-current={selected ? 'page' : undefined}
    >
      {mode === 'rename' ? (
        <input
          ref={input}
          className="rename-input"
          data-testid="rename-input"
          value={draft}
          aria-label="Conversation title"
          onChange={(e) => setDraft(e.target.value)}
          onKeyDown={onKeyDown}
          onBlur={() => void commit()}
        />
      ) : (
        <a
          className="conversation-link"
          data-testid="conversation-title"
          href={formatRoute({ page: 'chat', conversationId: conversation.id })}
          title={conversation.title}
          onDoubleClick={startRename}
        >
          {conversation.title}
        </a>
      )}
      {mode === 'view' && (
        <span className="conversation-actions">
          <button type="button" className="icon-btn" data-testid="conversation-rename" title="Rename" aria-label="Rename" onClick={startRename}>
            <PencilIcon />
          </button>
          <button
            type="button"
            className="icon-btn danger"
            data-testid="conversation-delete"
            title="Delete"
            aria-label="Delete"
            onClick={() => setMode('confirm')}
          >
            <TrashIcon />
          </button>
        </span>
      )}
      {mode === 'confirm' && (
        <div className="confirm" role="alertdialog" aria-label={`Delete ${conversation.title}?`}>
          <span data-testid="delete-question">
            {deleteQuestion(conversation)}
          </span>
          <button
            type="button"
            className="btn btn-danger"
            data-testid="delete-confirm"
            onClick={() => {
              setMode('view');
              void onDelete(conversation.id);
            }}
          >
            Delete
          </button>
          <button type="button" className="icon-btn" data-testid="delete-cancel" aria-label="Cancel" onClick={() => setMode('view')}>
            <CloseIcon />
          </button>
        </div>
      )}
    </li>
  );
}

/** What deleting a chat takes with it, in words: its images and clips, and their bytes. */
function deleteQuestion(c: Conversation): string {
  const parts: string[] = [];
  if (c.images) parts.push(c.images === 1 ? 'image' : `${c.images} images`);
  if (c.clips) parts.push(c.clips === 1 ? 'audio clip' : `${c.clips} audio clips`);
  if (parts.length === 0) return 'Delete this chat?';
  const bytes = (c.image_bytes ?? 0) + (c.clip_bytes ?? 0);
  return `Delete this chat and its ${parts.join(' and ')} (${formatBytes(bytes)})?`;
}
