/**
 * The chat's event streams: `POST /api/conversations/{id}/chat` (a message, regenerate, edit)
 * and `POST /api/conversations/{id}/tool_calls/{call_id}` (the user's answer to a call that
 * waits for consent), both delivering their SSE events in order. Reads the body with fetch +
 * ReadableStream (EventSource cannot POST). A non-2xx answer (409 while another answer streams
 * or the call no longer waits, 404) becomes an `ApiError` before any event.
 */
import { apiFetch, ApiError } from './client';
import type { ToolDecision } from './mcpTypes';
import { readSse } from './sse';
import { parseChatEvent, type ChatEvent, type ChatRequest } from './types';

export type EventSink = (event: ChatEvent) => void;

export function streamChat(
  conversationId: string,
  body: ChatRequest,
  onEvent: EventSink,
  signal?: AbortSignal,
  /** The node took the request (a 2xx answer), before its first event. */
  onTaken?: () => void,
): Promise<void> {
  return postStream(`/api/conversations/${encodeURIComponent(conversationId)}/chat`, body, onEvent, signal, onTaken);
}

/** The body of a consent decision; `reason` goes only with `deny` (the model is told it). */
export type ToolDecisionBody = { decision: ToolDecision; reason?: string };

export function toolDecisionBody(decision: ToolDecision, reason?: string): ToolDecisionBody {
  const trimmed = reason?.trim();
  return decision === 'deny' && trimmed ? { decision, reason: trimmed } : { decision };
}

export function streamToolDecision(
  conversationId: string,
  callId: string,
  body: ToolDecisionBody,
  onEvent: EventSink,
  signal?: AbortSignal,
): Promise<void> {
  const path = `/api/conversations/${encodeURIComponent(conversationId)}/tool_calls/${encodeURIComponent(callId)}`;
  return postStream(path, body, onEvent, signal);
}

async function postStream(
  path: string,
  body: unknown,
  onEvent: EventSink,
  signal?: AbortSignal,
  onTaken?: () => void,
): Promise<void> {
  const res = await apiFetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await ApiError.from(res);
  onTaken?.();
  if (!res.body) throw new Error('The node sent no stream');
  await readSse(res.body, (data) => {
    const event = parseChatEvent(data);
    if (event) onEvent(event);
  });
}
