/**
 * Pure helpers for the MCP tool calls in a thread: a call's event applied to its message, the
 * calls that wait for the user, the message a stop must name while a call runs, and whether a
 * stream of the tool loop ended where the node meant it to (`StreamEnd`).
 */
import type { ToolCall } from '../api/mcpTypes';
import type { ChatEvent, Message } from '../api/types';

/** Puts `call` into message `messageId`'s calls (replacing the one with its id). */
export function upsertCall(messages: Message[], messageId: string, call: ToolCall): Message[] {
  const i = messages.findIndex((m) => m.id === messageId);
  if (i < 0) return messages;
  const calls = messages[i].tool_calls ?? [];
  const at = calls.findIndex((c) => c.id === call.id);
  const next = messages.slice();
  next[i] = { ...messages[i], tool_calls: at < 0 ? [...calls, call] : calls.map((c, j) => (j === at ? call : c)) };
  return next;
}

/** The `consent` event: the calls it names wait for the user (whatever this page saw before). */
export function markPending(messages: Message[], messageId: string, callIds: string[]): Message[] {
  const waiting = new Set(callIds);
  return messages.map((m) =>
    m.id === messageId && m.tool_calls
      ? { ...m, tool_calls: m.tool_calls.map((c) => (waiting.has(c.id) && c.state !== 'pending' ? { ...c, state: 'pending' } : c)) }
      : m,
  );
}

/** The calls that wait for the user's consent, oldest first. */
export function pendingCalls(messages: Message[]): ToolCall[] {
  return messages.flatMap((m) => (m.tool_calls ?? []).filter((c) => c.state === 'pending'));
}

/** The answer a running call belongs to: stopping it cancels the call (docs/API.md). */
export function messageWithRunningCall(messages: Message[]): Message | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    if ((messages[i].tool_calls ?? []).some((c) => c.state === 'running')) return messages[i];
  }
  return null;
}

/**
 * Where a stream stands, to tell an end the node meant from a lost connection:
 * - `idle`: no answer started yet;
 * - `open`: an answer streams (`start` came, its `done` has not);
 * - `between`: an answer made calls (`done` with `next`): the calls run, another `start` may come;
 * - `final`: the turn ended (`done` without `next`, `error`, `consent`), or a `notice` came
 *   between two steps (the node says why the loop stops there, e.g. the step limit).
 */
export type StreamEnd = 'idle' | 'open' | 'between' | 'final';

export function trackStreamEnd(state: StreamEnd, event: ChatEvent): StreamEnd {
  switch (event.type) {
    case 'start':
      return 'open';
    case 'done':
      return event.next ? 'between' : 'final';
    case 'error':
    case 'consent':
      return 'final';
    case 'notice':
      return state === 'between' ? 'final' : state;
    default:
      return state;
  }
}
