/**
 * One conversation's messages as the UI shows them, and the pure functions that change them:
 * the chat stream's events (`applyChatEvent`, the tool loop's included) and the optimistic edits
 * made when the user acts (`beginSend`, `beginRegenerate`, `beginEdit`), so the screen answers
 * before the node does.
 *
 * Invariants: messages keep the server's order (oldest first); at most one assistant message
 * receives tokens (`streamingId`); a placeholder user message has an id starting with
 * `LOCAL_ID_PREFIX` and is replaced by the stored one when the `user` event arrives. A tool
 * loop's answers are separate messages, each with its calls (`tool_calls`). Notices are not
 * stored by the node: they live on this page, each shown after the message that was last when
 * it came (and gone with that message).
 */
import type { ChatEvent, Message, MessageAudio, MessageImage } from '../api/types';
import { markPending, upsertCall } from './toolCalls';

export const LOCAL_ID_PREFIX = 'local_';

/** A `notice` of the stream, shown inline after message `after` (or at the end when null). */
export interface Notice {
  id: string;
  text: string;
  after: string | null;
}

export interface Thread {
  messages: Message[];
  /** The assistant message that tokens go to, while this client streams it. */
  streamingId: string | null;
  notices: Notice[];
}

export const emptyThread: Thread = { messages: [], streamingId: null, notices: [] };

export function applyChatEvent(thread: Thread, event: ChatEvent): Thread {
  switch (event.type) {
    case 'user':
      return { ...thread, messages: upsertUser(thread.messages, event.message) };
    case 'start':
      return { ...thread, messages: upsert(thread.messages, event.message), streamingId: event.message.id };
    case 'tool_call':
    case 'tool_update':
      return { ...thread, messages: upsertCall(thread.messages, event.message_id, event.call) };
    case 'consent':
      return { ...thread, messages: markPending(thread.messages, event.message_id, event.calls), streamingId: null };
    case 'notice': {
      const after = thread.messages[thread.messages.length - 1]?.id ?? null;
      const notice = { id: `notice_${thread.notices.length}`, text: event.text, after };
      return { ...thread, notices: [...thread.notices, notice] };
    }
    case 'token': {
      const id = thread.streamingId;
      if (id === null) return thread;
      return {
        ...thread,
        messages: thread.messages.map((m) => (m.id === id ? { ...m, content: m.content + event.text } : m)),
      };
    }
    case 'done':
      return {
        ...thread,
        messages: upsert(thread.messages, event.message),
        streamingId: thread.streamingId === event.message.id ? null : thread.streamingId,
      };
    case 'error':
      return {
        ...thread,
        messages: event.message ? upsert(thread.messages, event.message) : thread.messages,
        streamingId: null,
      };
  }
}

/** The user pressed send: show their message (and the images they attached) at once. */
export function beginSend(
  thread: Thread,
  conversationId: string,
  content: string,
  now: number,
  images: MessageImage[] = [],
  audio: MessageAudio[] = [],
): Thread {
  const placeholder: Message = {
    id: `${LOCAL_ID_PREFIX}${now}`,
    conversation_id: conversationId,
    role: 'user',
    content,
    status: 'complete',
    model: null,
    node: null,
    error: null,
    stats: null,
    created_at: now,
    images,
    audio,
  };
  return { ...thread, messages: [...thread.messages, placeholder] };
}

/** The user asked for another answer: the node deletes the last answer, so do we. */
export function beginRegenerate(thread: Thread): Thread {
  const last = thread.messages[thread.messages.length - 1];
  if (!last || last.role !== 'assistant') return thread;
  return { ...thread, messages: thread.messages.slice(0, -1) };
}

/** The user edited one of their messages: new text, and everything after it goes. */
export function beginEdit(thread: Thread, messageId: string, content: string): Thread {
  const i = thread.messages.findIndex((m) => m.id === messageId);
  if (i < 0) return thread;
  return { ...thread, messages: [...thread.messages.slice(0, i), { ...thread.messages[i], content }] };
}

/** The stream broke without a final event (network gone, node killed): stop feeding tokens. */
export function endWithoutFinal(thread: Thread): Thread {
  const id = thread.streamingId;
  return {
    ...thread,
    streamingId: null,
    messages: thread.messages
      .filter((m) => !m.id.startsWith(LOCAL_ID_PREFIX))
      .map((m) => (m.id === id && m.status === 'streaming' ? { ...m, status: 'interrupted' } : m)),
  };
}

/** The answer regenerate would replace: the last message, when it is an answer. */
export function lastAnswer(thread: Thread): Message | null {
  const last = thread.messages[thread.messages.length - 1];
  return last && last.role === 'assistant' ? last : null;
}

/** An answer still streaming, whoever streams it (this client, another tab, a reload). */
export function streamingMessage(thread: Thread): Message | null {
  return thread.messages.find((m) => m.status === 'streaming') ?? null;
}

/** A conversation title from its first message: first line, at most `max` characters. */
export function titleFrom(content: string, max = 48): string {
  const line = content.trim().split(/\r?\n/)[0]?.replace(/\s+/g, ' ') ?? '';
  if (!line) return 'New chat';
  const chars = Array.from(line);
  return chars.length <= max ? line : `${chars.slice(0, max - 1).join('').trimEnd()}…`;
}

function upsert(messages: Message[], message: Message): Message[] {
  const i = messages.findIndex((m) => m.id === message.id);
  if (i < 0) return [...messages, message];
  const next = messages.slice();
  next[i] = message;
  return next;
}

/** The stored user message replaces the placeholder; an edited one also drops what followed. */
function upsertUser(messages: Message[], message: Message): Message[] {
  const kept = messages.filter((m) => !m.id.startsWith(LOCAL_ID_PREFIX));
  const i = kept.findIndex((m) => m.id === message.id);
  if (i < 0) return [...kept, message];
  return [...kept.slice(0, i), message];
}
