/**
 * `POST /api/conversations/{id}/chat`: sends one chat request and delivers its SSE events in
 * order. Reads the body with fetch + ReadableStream (EventSource cannot POST). A non-2xx
 * answer (409 while another answer streams, 404) becomes an `ApiError` before any event.
 */
import { apiFetch, ApiError } from './client';
import { readSse } from './sse';
import { parseChatEvent, type ChatEvent, type ChatRequest } from './types';

export async function streamChat(
  conversationId: string,
  body: ChatRequest,
  onEvent: (event: ChatEvent) => void,
  signal?: AbortSignal,
  /** The node took the request (a 2xx answer), before its first event. */
  onTaken?: () => void,
): Promise<void> {
  const res = await apiFetch(`/api/conversations/${encodeURIComponent(conversationId)}/chat`, {
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
