/**
 * The conversations on screen and their streams, outside React so an answer keeps streaming
 * (and is shown again, complete) while the user looks at another conversation or page.
 * Components read it with `useSyncExternalStore` (see hooks.ts); every change replaces the
 * view object of that conversation, so unchanged conversations keep their identity.
 *
 * Consistency rules:
 * - while this client streams into a conversation, a reload of it from the server is not
 *   applied (the stream is fresher than the stored copy, which is saved every 250 ms);
 *   `epoch` detects a reload that was started before or during a stream and finished after;
 * - a stream that ends without its final event (`done` without `next`, `error`, `consent`; see
 *   `trackStreamEnd`) marks its answer interrupted and reloads;
 * - a tool loop's answers and calls arrive in one stream; the user's answer to a call that
 *   waits (`decide`) opens another, applied the same way;
 * - an answer streamed by someone else (another tab, or this page before a reload) is
 *   refreshed every `POLL_MS` while the conversation is on screen, until it is final.
 */
import { streamChat, streamToolDecision, toolDecisionBody } from '../api/chatStream';
import { ApiError, api, errorText } from '../api/client';
import type { ToolDecision } from '../api/mcpTypes';
import type { ChatEvent, ChatRequest, Conversation, ConversationSettings, MessageAudio, MessageImage } from '../api/types';
import {
  applyChatEvent,
  beginEdit,
  beginRegenerate,
  beginSend,
  emptyThread,
  endWithoutFinal,
  streamingMessage,
  titleFrom,
  type Thread,
} from './thread';
import { messageWithRunningCall, trackStreamEnd, type StreamEnd } from './toolCalls';

/** How often an answer streamed elsewhere is reloaded while on screen. */
export const POLL_MS = 1000;
/** The title the node gives a conversation created without one. */
export const DEFAULT_TITLE = 'New chat';

export interface ThreadView extends Thread {
  conversation: Conversation | null;
  /** The first load finished (successfully or not). */
  loaded: boolean;
  /** The node answered 404 for this conversation. */
  missing: boolean;
  /** This client's chat request is in flight. */
  sending: boolean;
  /** The last failure to show above the composer. */
  error: string | null;
}

export const EMPTY_VIEW: ThreadView = {
  ...emptyThread,
  conversation: null,
  loaded: false,
  missing: false,
  sending: false,
  error: null,
};

export interface ChatStoreHooks {
  /** A conversation changed in a way the list shows (new message, title). */
  onActivity: (conversationId: string) => void;
}

export class ChatStore {
  private readonly views = new Map<string, ThreadView>();
  private readonly epochs = new Map<string, number>();
  private readonly listeners = new Set<() => void>();
  private active: string | null = null;
  private pollTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly hooks: ChatStoreHooks) {}

  subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  view = (id: string | null): ThreadView => (id ? (this.views.get(id) ?? EMPTY_VIEW) : EMPTY_VIEW);

  /** The conversation on screen (or none): load it, and watch answers streamed elsewhere. */
  setActive(id: string | null): void {
    this.active = id;
    this.clearPoll();
    if (id) void this.load(id);
  }

  /** A conversation this client just created: known to be empty. */
  adopt(conversation: Conversation): void {
    this.update(conversation.id, (v) => ({ ...v, conversation, loaded: true, missing: false }));
  }

  /** A conversation's metadata changed (rename, settings). */
  setConversation(conversation: Conversation): void {
    if (this.views.has(conversation.id)) this.update(conversation.id, (v) => ({ ...v, conversation }));
  }

  forget(id: string): void {
    this.views.delete(id);
    this.emit();
  }

  async load(id: string): Promise<void> {
    const epoch = this.epoch(id);
    try {
      const detail = await api.getConversation(id);
      this.update(id, (v) => {
        const streamRaced = v.sending || this.epoch(id) !== epoch;
        return streamRaced
          ? { ...v, conversation: detail.conversation, loaded: true, missing: false }
          : {
              ...v,
              conversation: detail.conversation,
              messages: detail.messages,
              streamingId: null,
              loaded: true,
              missing: false,
            };
      });
    } catch (e) {
      const missing = e instanceof ApiError && e.status === 404;
      // Keep an earlier, more specific error (a broken stream) over "cannot reach".
      this.update(id, (v) => ({ ...v, loaded: true, missing, error: missing ? null : (v.error ?? errorText(e)) }));
    }
    this.schedulePoll(id);
  }

  /**
   * Sends a chat request and applies its stream; resolves when the stream ended: true when the
   * node took the request, false when it refused it (it then keeps nothing of it) or could not
   * be reached, so the composer can give the user their words and images back.
   */
  async send(id: string, request: ChatRequest): Promise<boolean> {
    const before = this.view(id);
    if (before.sending) return false;
    const isFirstMessage = 'content' in request && !('edit_message_id' in request) && before.messages.length === 0;
    const optimistic =
      'regenerate' in request
        ? beginRegenerate(before)
        : 'edit_message_id' in request
          ? beginEdit(before, request.edit_message_id, request.content)
          : beginSend(before, id, request.content, Date.now(), localImages(request), localAudio(request));
    let taken = false;
    await this.runStream(id, optimistic, 'chat', (onEvent) =>
      streamChat(
        id,
        request,
        (event) => {
          onEvent(event);
          if (event.type === 'user' && isFirstMessage && 'content' in request) void this.autoTitle(id, request.content);
        },
        undefined,
        () => (taken = true),
      ),
    );
    return taken;
  }

  /**
   * Answers a tool call that waits for consent and applies the stream that follows (the call's
   * update, then the loop going on once no call of that answer waits). Resolves when it ended.
   */
  async decide(id: string, callId: string, decision: ToolDecision, reason?: string): Promise<void> {
    const before = this.view(id);
    if (before.sending) return;
    await this.runStream(id, before, 'decision', (onEvent) =>
      streamToolDecision(id, callId, toolDecisionBody(decision, reason), onEvent),
    );
  }

  /**
   * Shows `optimistic`, opens a stream and applies its events. A chat stream must reach its
   * final event; a decision's stream may also end after only updates (other calls still wait).
   * On a failure the error is shown and the server's copy reloaded (a refused request left
   * nothing behind); a send before the first load finished has not seen the earlier messages.
   */
  private async runStream(
    id: string,
    optimistic: Thread,
    kind: 'chat' | 'decision',
    open: (onEvent: (event: ChatEvent) => void) => Promise<void>,
  ): Promise<void> {
    const before = this.view(id);
    this.bumpEpoch(id);
    this.clearPoll();
    this.update(id, (v) => ({ ...v, ...optimistic, sending: true, error: null }));

    // Set by the event callback (an object, so the check after `await` reads it as changed).
    const seen: { end: StreamEnd; events: number } = { end: 'idle', events: 0 };
    let failed = false;
    try {
      await open((event) => {
        seen.events++;
        seen.end = trackStreamEnd(seen.end, event);
        this.update(id, (v) => ({
          ...v,
          ...applyChatEvent(v, event),
          error: event.type === 'error' && !event.message ? event.error : v.error,
        }));
      });
      const cleanEnd = seen.end === 'final' || (kind === 'decision' && seen.end === 'idle' && seen.events > 0);
      if (!cleanEnd) throw new Error('The answer ended early: the connection to the node was lost.');
    } catch (e) {
      failed = true;
      this.update(id, (v) => ({ ...v, ...endWithoutFinal(v), error: streamErrorText(e, kind) }));
    } finally {
      this.bumpEpoch(id);
      this.update(id, (v) => ({ ...v, sending: false }));
      this.hooks.onActivity(id);
    }
    if (failed || !before.loaded) await this.load(id);
  }

  /** Stops the answer streaming in this conversation, whoever streams it. */
  async stop(id: string): Promise<void> {
    const v = this.view(id);
    // Between two answers of a tool loop nothing streams: stopping the answer whose call runs
    // cancels that call.
    const messageId = v.streamingId ?? streamingMessage(v)?.id ?? messageWithRunningCall(v.messages)?.id;
    if (!messageId) return;
    try {
      await api.stopMessage(messageId);
    } catch (e) {
      // 404: it ended on its own meanwhile.
      if (!(e instanceof ApiError && e.status === 404)) this.update(id, (w) => ({ ...w, error: errorText(e) }));
    }
    if (!this.view(id).sending) await this.load(id);
  }

  async saveSettings(id: string, settings: ConversationSettings): Promise<void> {
    const conversation = await api.updateConversation(id, { settings });
    this.update(id, (v) => ({ ...v, conversation }));
  }

  clearError(id: string): void {
    this.update(id, (v) => ({ ...v, error: null }));
  }

  private async autoTitle(id: string, content: string): Promise<void> {
    const title = this.view(id).conversation?.title;
    if (title !== undefined && title !== DEFAULT_TITLE) return;
    try {
      const conversation = await api.updateConversation(id, { title: titleFrom(content) });
      this.update(id, (v) => ({ ...v, conversation }));
      this.hooks.onActivity(id);
    } catch {
      // The default title stays; nothing else depends on it.
    }
  }

  private schedulePoll(id: string): void {
    this.clearPoll();
    const v = this.view(id);
    if (this.active !== id || v.sending || !streamingMessage(v)) return;
    this.pollTimer = setTimeout(() => {
      this.pollTimer = null;
      if (this.active === id) void this.load(id);
    }, POLL_MS);
  }

  private clearPoll(): void {
    if (this.pollTimer !== null) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  private epoch(id: string): number {
    return this.epochs.get(id) ?? 0;
  }

  private bumpEpoch(id: string): void {
    this.epochs.set(id, this.epoch(id) + 1);
  }

  private update(id: string, change: (v: ThreadView) => ThreadView): void {
    this.views.set(id, change(this.view(id)));
    this.emit();
  }

  private emit(): void {
    for (const listener of this.listeners) listener();
  }
}

/** The images of a message being sent, shown from this page until the node has stored them. */
function localImages(request: ChatRequest): MessageImage[] {
  if (!('images' in request) || !request.images) return [];
  return request.images.map((url, i) => {
    return {
      id: `local_image_${i}`,
      mime: url.slice(5, url.indexOf(';')),
      width: 0,
      height: 0,
      size: dataUrlBytes(url),
      local_url: url,
    };
  });
}

/** The clips of a message being sent, shown from this page until the node has stored them. */
function localAudio(request: ChatRequest): MessageAudio[] {
  if (!('audio' in request) || !request.audio) return [];
  return request.audio.map((url, i) => ({
    id: `local_audio_${i}`,
    // The data URL's type (its head, never its payload), as the node will find it by the bytes.
    format: /mpeg|mp3/.test(url.slice(0, url.indexOf(','))) ? 'mp3' : 'wav',
    size: dataUrlBytes(url),
    local_url: url,
  }));
}

/** The bytes a base64 data URL holds. */
function dataUrlBytes(url: string): number {
  const base64 = url.slice(url.indexOf(',') + 1);
  const padding = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  return Math.floor((base64.length * 3) / 4) - padding;
}

/** A failed chat call or decision, in words; a 409 is the one case the chat says more about. */
function streamErrorText(e: unknown, kind: 'chat' | 'decision'): string {
  if (e instanceof ApiError && e.status === 409) {
    return kind === 'chat'
      ? 'An answer is already streaming in this conversation.'
      : 'This call no longer waits for an answer, or an answer is streaming in this conversation.';
  }
  return errorText(e);
}
