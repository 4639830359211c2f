import { describe, expect, it } from 'vitest';
import type { ToolCall } from '../api/mcpTypes';
import { parseChatEvent, type Message } from '../api/types';
import { message } from '../testSupport';
import { applyChatEvent, emptyThread, type Thread } from './thread';
import { messageWithRunningCall, pendingCalls, trackStreamEnd, type StreamEnd } from './toolCalls';

const user = message({ id: 'm_u', role: 'user', content: 'What files are in my notes?' });

function call(overrides: Partial<ToolCall> & Pick<ToolCall, 'id' | 'state'>): ToolCall {
  return {
    name: 'files__list_directory',
    server: 'files',
    tool: 'list_directory',
    arguments: { path: '/home/me/notes' },
    consent: null,
    reason: null,
    outcome: null,
    error: null,
    ...overrides,
  };
}

/** Feeds events as the node writes them (JSON payloads), through the same parser as the page. */
function play(start: Thread, events: unknown[]): { thread: Thread; end: StreamEnd } {
  let thread = start;
  let end: StreamEnd = 'idle';
  for (const e of events) {
    const event = parseChatEvent(JSON.stringify(e));
    expect(event, `unparsed ${JSON.stringify(e)}`).not.toBeNull();
    thread = applyChatEvent(thread, event!);
    end = trackStreamEnd(end, event!);
  }
  return { thread, end };
}

const streaming = (id: string): Message => message({ id, role: 'assistant', status: 'streaming' });
const complete = (id: string, extra: Partial<Message> = {}): Message =>
  message({ id, role: 'assistant', status: 'complete', ...extra });

describe('the tool loop in the chat stream', () => {
  it('runs two steps in one stream: a call allowed already, its result, then the answer', () => {
    const running = call({ id: 'call_1', state: 'running', consent: 'chat' });
    const done = {
      ...running,
      state: 'done' as const,
      outcome: { parts: [{ type: 'text' as const, text: 'a.md\nb.md' }], is_error: false, cut_bytes: 0 },
    };
    const { thread, end } = play(emptyThread, [
      { type: 'user', message: user },
      { type: 'start', message: streaming('m_a1') },
      { type: 'tool_call', message_id: 'm_a1', call: running },
      { type: 'done', message: complete('m_a1', { tool_calls: [running] }), next: true },
      { type: 'tool_update', message_id: 'm_a1', call: done },
      { type: 'start', message: streaming('m_a2') },
      { type: 'token', text: 'Two files: ' },
      { type: 'token', text: 'a.md and b.md.' },
      { type: 'done', message: complete('m_a2', { content: 'Two files: a.md and b.md.' }) },
    ]);
    expect(end).toBe('final');
    expect(thread.streamingId).toBeNull();
    expect(thread.messages.map((m) => m.id)).toEqual(['m_u', 'm_a1', 'm_a2']);
    // The update reached the first answer's call; tokens went only to the second answer.
    expect(thread.messages[1].tool_calls).toEqual([done]);
    expect(thread.messages[1].content).toBe('');
    expect(thread.messages[2].content).toBe('Two files: a.md and b.md.');
  });

  it('a stream cut between two steps is not a clean end', () => {
    const running = call({ id: 'call_1', state: 'running' });
    const { end } = play(emptyThread, [
      { type: 'start', message: streaming('m_a1') },
      { type: 'tool_call', message_id: 'm_a1', call: running },
      { type: 'done', message: complete('m_a1', { tool_calls: [running] }), next: true },
    ]);
    expect(end).toBe('between');
    // ...unless the node says why the loop stops there.
    const told = play(emptyThread, [
      { type: 'start', message: streaming('m_a1') },
      { type: 'done', message: complete('m_a1', { tool_calls: [running] }), next: true },
      { type: 'notice', text: 'The step limit (10) was reached.' },
    ]);
    expect(told.end).toBe('final');
    expect(told.thread.notices).toEqual([{ id: 'notice_0', text: 'The step limit (10) was reached.', after: 'm_a1' }]);
  });

  it('stops for consent: the pending calls are known, nothing streams', () => {
    const pending = call({ id: 'call_1', state: 'pending' });
    const other = call({ id: 'call_2', state: 'pending', tool: 'read_file', name: 'files__read_file' });
    const { thread, end } = play(emptyThread, [
      { type: 'user', message: user },
      { type: 'start', message: streaming('m_a1') },
      { type: 'tool_call', message_id: 'm_a1', call: pending },
      { type: 'tool_call', message_id: 'm_a1', call: other },
      { type: 'done', message: complete('m_a1', { tool_calls: [pending, other] }), next: true },
      { type: 'consent', message_id: 'm_a1', calls: ['call_1', 'call_2'] },
    ]);
    expect(end).toBe('final');
    expect(thread.streamingId).toBeNull();
    expect(pendingCalls(thread.messages).map((c) => c.id)).toEqual(['call_1', 'call_2']);
  });

  it('applies an update to the call of an earlier answer (a decision stream)', () => {
    const pending = call({ id: 'call_1', state: 'pending' });
    const start: Thread = { ...emptyThread, messages: [user, complete('m_a1', { tool_calls: [pending] })] };
    const denied = { ...pending, state: 'denied' as const, reason: 'Not that folder' };
    const { thread, end } = play(start, [{ type: 'tool_update', message_id: 'm_a1', call: denied }]);
    expect(thread.messages[1].tool_calls).toEqual([denied]);
    expect(pendingCalls(thread.messages)).toEqual([]);
    // Only an update: the store accepts this end for a decision, never for a chat stream.
    expect(end).toBe('idle');
  });

  it('an update for an unknown message changes nothing', () => {
    const start: Thread = { ...emptyThread, messages: [user] };
    const { thread } = play(start, [{ type: 'tool_update', message_id: 'm_zz', call: call({ id: 'c', state: 'done' }) }]);
    expect(thread.messages).toEqual([user]);
  });

  it('finds the answer whose call runs, to stop it', () => {
    const messages = [user, complete('m_a1', { tool_calls: [call({ id: 'c1', state: 'running' })] })];
    expect(messageWithRunningCall(messages)?.id).toBe('m_a1');
    expect(messageWithRunningCall([user])).toBeNull();
  });
});

describe('parsing tool events', () => {
  it('fills a call from its name and drops malformed events', () => {
    const event = parseChatEvent(
      JSON.stringify({ type: 'tool_call', message_id: 'm', call: { id: 'c', state: 'pending', name: 'fs__read' } }),
    );
    expect(event).toMatchObject({ type: 'tool_call', call: { server: 'fs', tool: 'read', arguments: {}, outcome: null } });
    expect(parseChatEvent('{"type":"tool_update","message_id":"m","call":{"state":"done"}}')).toBeNull();
    expect(parseChatEvent('{"type":"consent","calls":["c"]}')).toBeNull();
    expect(parseChatEvent('{"type":"notice"}')).toBeNull();
    expect(parseChatEvent('{"type":"done","message":{"id":"m","role":"assistant"},"next":"yes"}')).toEqual({
      type: 'done',
      message: { id: 'm', role: 'assistant' },
    });
  });
});
