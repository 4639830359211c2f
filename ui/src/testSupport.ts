/** Builders shared by the unit tests (not bundled: only *.test.ts import it). */
import type { Message } from './api/types';

export function message(overrides: Partial<Message> & Pick<Message, 'id' | 'role'>): Message {
  return {
    conversation_id: 'c_1',
    content: '',
    status: 'complete',
    model: null,
    node: null,
    error: null,
    stats: null,
    created_at: 0,
    ...overrides,
  };
}

/** An SSE body as the node sends it: one `data:` line per event, blank line after each. */
export function sseBody(events: unknown[]): string {
  return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');
}
