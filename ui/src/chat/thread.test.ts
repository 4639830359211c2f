import { describe, expect, it } from 'vitest';
import { message } from '../testSupport';
import {
  applyChatEvent,
  beginEdit,
  beginRegenerate,
  beginSend,
  emptyThread,
  endWithoutFinal,
  lastAnswer,
  LOCAL_ID_PREFIX,
  streamingMessage,
  titleFrom,
  type Thread,
} from './thread';

const u1 = message({ id: 'm_u1', role: 'user', content: 'first' });
const a1 = message({ id: 'm_a1', role: 'assistant', content: 'answer one' });
const u2 = message({ id: 'm_u2', role: 'user', content: 'second' });
const a2 = message({ id: 'm_a2', role: 'assistant', content: 'answer two' });
const thread: Thread = { messages: [u1, a1, u2, a2], streamingId: null, notices: [] };

describe('applyChatEvent', () => {
  it('replaces the placeholder of a sent message by the stored one', () => {
    const sent = beginSend(thread, 'c_1', 'third', 7);
    expect(sent.messages.at(-1)?.id).toBe(`${LOCAL_ID_PREFIX}7`);
    const stored = message({ id: 'm_u3', role: 'user', content: 'third' });
    const next = applyChatEvent(sent, { type: 'user', message: stored });
    expect(next.messages.map((m) => m.id)).toEqual(['m_u1', 'm_a1', 'm_u2', 'm_a2', 'm_u3']);
  });

  it('streams tokens into the started answer only, then takes the final message', () => {
    const start = message({ id: 'm_a3', role: 'assistant', status: 'streaming' });
    let t = applyChatEvent(thread, { type: 'start', message: start });
    expect(t.streamingId).toBe('m_a3');
    t = applyChatEvent(t, { type: 'token', text: 'Hel' });
    t = applyChatEvent(t, { type: 'token', text: 'lo' });
    expect(t.messages.at(-1)?.content).toBe('Hello');
    expect(t.messages.slice(0, 4)).toEqual(thread.messages);
    expect(streamingMessage(t)?.id).toBe('m_a3');
    const final = { ...start, content: 'Hello', status: 'stopped' as const, stats: { tokens: 2, tokens_per_s: 50, ttft_ms: 10 } };
    t = applyChatEvent(t, { type: 'done', message: final });
    expect(t.streamingId).toBeNull();
    expect(t.messages.at(-1)).toEqual(final);
    expect(streamingMessage(t)).toBeNull();
  });

  it('ignores tokens when no answer was started', () => {
    expect(applyChatEvent(thread, { type: 'token', text: 'x' })).toBe(thread);
  });

  it('stores a failed answer with what it had and stops streaming', () => {
    const start = message({ id: 'm_a3', role: 'assistant', status: 'streaming' });
    let t = applyChatEvent(thread, { type: 'start', message: start });
    t = applyChatEvent(t, { type: 'token', text: 'partial' });
    const failed = { ...start, content: 'partial', status: 'error' as const, error: 'model unloaded' };
    t = applyChatEvent(t, { type: 'error', error: 'model unloaded', message: failed });
    expect(t.streamingId).toBeNull();
    expect(t.messages.at(-1)).toEqual(failed);
  });

  it('an edited message drops every message after it when the node confirms it', () => {
    const optimistic = beginEdit(thread, 'm_u1', 'first, edited');
    expect(optimistic.messages.map((m) => m.content)).toEqual(['first, edited']);
    const stored = { ...u1, content: 'first, edited' };
    const next = applyChatEvent(thread, { type: 'user', message: stored });
    expect(next.messages).toEqual([stored]);
  });
});

describe('optimistic changes', () => {
  it('regenerate removes the last answer, and only an answer', () => {
    expect(beginRegenerate(thread).messages.map((m) => m.id)).toEqual(['m_u1', 'm_a1', 'm_u2']);
    const endsWithUser: Thread = { messages: [u1], streamingId: null, notices: [] };
    expect(beginRegenerate(endsWithUser)).toBe(endsWithUser);
    expect(lastAnswer(thread)?.id).toBe('m_a2');
    expect(lastAnswer(endsWithUser)).toBeNull();
  });

  it('a broken stream marks its answer interrupted and drops placeholders', () => {
    const start = message({ id: 'm_a3', role: 'assistant', status: 'streaming' });
    let t = beginSend(thread, 'c_1', 'x', 1);
    t = applyChatEvent(t, { type: 'start', message: start });
    const ended = endWithoutFinal(t);
    expect(ended.streamingId).toBeNull();
    expect(ended.messages.some((m) => m.id.startsWith(LOCAL_ID_PREFIX))).toBe(false);
    expect(ended.messages.at(-1)?.status).toBe('interrupted');
    expect(endWithoutFinal(emptyThread).messages).toEqual([]);
  });
});

describe('titleFrom', () => {
  it('takes the first line, collapsed and shortened by characters', () => {
    expect(titleFrom('  Tell me   a story\nabout cats')).toBe('Tell me a story');
    expect(titleFrom('')).toBe('New chat');
    const long = titleFrom('🔥'.repeat(60), 10);
    expect(Array.from(long)).toHaveLength(10);
    expect(long.endsWith('…')).toBe(true);
  });
});
