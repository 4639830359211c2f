/**
 * The chat pane of one conversation (or of none yet: the first message creates it): title bar
 * with the settings drawer, the messages (with their tool calls and consent buttons), the
 * composer. Esc stops a streaming answer.
 */
import { useEffect, useRef, useState } from 'react';
import type { Conversation } from '../api/types';
import type { Attachment } from '../chat/attachments';
import type { ChatStore } from '../chat/store';
import { useDocuments } from '../chat/useDocuments';
import { streamingMessage } from '../chat/thread';
import { useThread } from '../hooks';
import type { LiveState } from '../status/live';
import { Composer } from './Composer';
import { DocumentsBar } from './DocumentsBar';
import { CloseIcon, MenuIcon, SlidersIcon } from './icons';
import { MessageList } from './Messages';
import { SettingsDrawer } from './SettingsDrawer';

export interface ChatViewProps {
  store: ChatStore;
  conversationId: string | null;
  live: LiveState;
  /** Creates a conversation for a first message sent with none selected. */
  onCreate: () => Promise<Conversation>;
  onToggleSidebar: () => void;
}

export function ChatView({ store, conversationId, live, onCreate, onToggleSidebar }: ChatViewProps) {
  const view = useThread(store, conversationId);
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [createError, setCreateError] = useState<string | null>(null);
  const busy = view.sending || streamingMessage(view) !== null;
  const documents = useDocuments(conversationId);

  useEffect(() => {
    store.setActive(conversationId);
    return () => store.setActive(null);
  }, [store, conversationId]);

  useEffect(() => {
    if (!busy || !conversationId) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && !e.defaultPrevented) {
        e.preventDefault();
        void store.stop(conversationId);
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [busy, conversationId, store]);

  /** The conversation on screen, made first when there is none (once, however many files
   * and messages ask meanwhile); `null` when it cannot be. */
  const creating = useRef<Promise<string | null> | null>(null);
  useEffect(() => {
    // Another conversation on screen (the one made, or "New chat" again): the next is new.
    creating.current = null;
  }, [conversationId]);
  const ensureConversation = (): Promise<string | null> => {
    if (conversationId) return Promise.resolve(conversationId);
    if (creating.current) return creating.current;
    const made = onCreate().then(
      (c) => c.id,
      (e: unknown) => {
        creating.current = null;
        setCreateError(e instanceof Error ? e.message : String(e));
        return null;
      },
    );
    creating.current = made;
    return made;
  };

  /** Sends a message; false when nothing of it was kept (the composer gives it back). */
  const send = async (text: string, files: Attachment[]): Promise<boolean> => {
    setCreateError(null);
    const id = await ensureConversation();
    if (!id) return false;
    const of = (kind: Attachment['kind']) => files.filter((a) => a.kind === kind).map((a) => a.dataUrl);
    const [images, audio] = [of('image'), of('audio')];
    return store.send(id, {
      content: text,
      ...(images.length > 0 ? { images } : {}),
      ...(audio.length > 0 ? { audio } : {}),
    });
  };

  const modelHint =
    live.model.state === 'ready' || live.model.state === 'loading'
      ? null
      : live.model.state === 'failed'
        ? 'The model failed to load: see the Models page.'
        : 'No model is loaded: load one on the Models page.';

  const error = createError ?? view.error;
  const title = view.conversation?.title ?? (conversationId ? '' : 'New chat');

  return (
    <section className="chat" aria-label="Chat">
      <div className="chat-head">
        <button type="button" className="icon-btn sidebar-toggle" onClick={onToggleSidebar} aria-label="Show or hide chats">
          <MenuIcon />
        </button>
        <h1 className="chat-title" data-testid="chat-title" title={title}>
          {title}
        </h1>
        {view.conversation && (
          <button
            type="button"
            className={`icon-btn${settingsOpen ? ' active' : ''}`}
            data-testid="settings-toggle"
            aria-expanded={settingsOpen}
            title="Conversation settings"
            aria-label="Conversation settings"
            onClick={() => setSettingsOpen((o) => !o)}
          >
            <SlidersIcon />
          </button>
        )}
      </div>

      {view.missing ? (
        <div className="empty-state" data-testid="conversation-missing">
          <h2>Conversation not found</h2>
          <p>It may have been deleted. Pick another one or start a new chat.</p>
        </div>
      ) : view.messages.length === 0 && !view.sending ? (
        <div className="empty-state">
          <div className="empty-mark" aria-hidden="true">
            ◆
          </div>
          <h2>{conversationId && !view.loaded ? 'Loading…' : 'How can I help?'}</h2>
          <p>Answers are generated on this machine{live.model.id ? ` by ${live.model.id}` : ''}.</p>
        </div>
      ) : (
        <MessageList
          conversationId={conversationId ?? ''}
          messages={view.messages}
          notices={view.notices}
          busy={busy}
          sending={view.sending}
          onRegenerate={() => conversationId && void store.send(conversationId, { regenerate: true })}
          onEdit={(messageId, content) =>
            conversationId && void store.send(conversationId, { edit_message_id: messageId, content })
          }
          onDecide={(callId, decision, reason) =>
            conversationId && void store.decide(conversationId, callId, decision, reason)
          }
        />
      )}

      {error && (
        <div className="chat-error" role="alert" data-testid="chat-error">
          <span>{error}</span>
          <button
            type="button"
            className="icon-btn"
            aria-label="Dismiss"
            onClick={() => {
              setCreateError(null);
              if (conversationId) store.clearError(conversationId);
            }}
          >
            <CloseIcon />
          </button>
        </div>
      )}

      <DocumentsBar
        documents={documents.documents}
        reading={documents.reading}
        refusal={documents.refusal}
        onDismiss={documents.dismiss}
        onRemove={(documentId) => conversationId && void documents.remove(conversationId, documentId)}
      />

      <Composer
        busy={busy}
        disabled={conversationId !== null && !view.loaded}
        hint={modelHint}
        hears={live.model.state === 'ready' && live.model.audio === true}
        focusKey={conversationId}
        onSend={send}
        onDocuments={(files) => {
          setCreateError(null);
          void ensureConversation().then((id) => {
            if (id) void documents.add(id, files);
          });
        }}
        onStop={() => conversationId && void store.stop(conversationId)}
      />

      {settingsOpen && view.conversation && (
        <SettingsDrawer
          conversation={view.conversation}
          onSave={(settings) => store.saveSettings(view.conversation!.id, settings)}
          onClose={() => setSettingsOpen(false)}
        />
      )}
    </section>
  );
}
