import { describe, expect, it } from 'vitest';
import { applyChatEvent, emptyThread, type Thread } from '../chat/thread';
import { message, sseBody } from '../testSupport';
import { readSse, SseDataDecoder } from './sse';
import { parseChatEvent } from './types';

const TOKENS = ['Hél', 'lo', ', wörld', ' 🔥', ' 中文', '\n\n```rust\nfn main() {}\n```', ' "quoted" \\ end'];
const ANSWER = TOKENS.join('');

function streamedEvents(): unknown[] {
  const user = message({ id: 'm_u', role: 'user', content: 'hi' });
  const start = message({ id: 'm_a', role: 'assistant', status: 'streaming' });
  const done = message({
    id: 'm_a',
    role: 'assistant',
    status: 'complete',
    content: ANSWER,
    stats: { tokens: 7, tokens_per_s: 80, ttft_ms: 120 },
  });
  return [
    { type: 'user', message: user },
    { type: 'start', message: start },
    ...TOKENS.map((text) => ({ type: 'token', text })),
    { type: 'done', message: done },
  ];
}

/** Feeds `bytes` in the given chunks and assembles the thread the way the UI does. */
function assemble(bytes: Uint8Array, cuts: number[]): { thread: Thread; contentSeen: string[] } {
  const decoder = new SseDataDecoder();
  let thread = emptyThread;
  const contentSeen: string[] = [];
  const apply = (data: string) => {
    const event = parseChatEvent(data);
    expect(event, `unparsable payload ${JSON.stringify(data)}`).not.toBeNull();
    thread = applyChatEvent(thread, event!);
    const answer = thread.messages.find((m) => m.id === 'm_a');
    if (answer) contentSeen.push(answer.content);
  };
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    decoder.push(bytes.subarray(from, cut)).forEach(apply);
    from = cut;
  }
  decoder.finish().forEach(apply);
  return { thread, contentSeen };
}

describe('SseDataDecoder', () => {
  const bytes = new TextEncoder().encode(sseBody(streamedEvents()));

  it('assembles the same answer whatever single byte the stream is cut at', () => {
    for (let cut = 0; cut <= bytes.length; cut++) {
      const { thread } = assemble(bytes, [cut]);
      expect(thread.messages.map((m) => m.id)).toEqual(['m_u', 'm_a']);
      expect(thread.messages[1].content).toBe(ANSWER);
      expect(thread.messages[1].status).toBe('complete');
      expect(thread.streamingId).toBeNull();
    }
  });

  it('assembles the answer from one-byte chunks, growing token by token', () => {
    const cuts = Array.from({ length: bytes.length - 1 }, (_, i) => i + 1);
    const { thread, contentSeen } = assemble(bytes, cuts);
    expect(thread.messages[1].content).toBe(ANSWER);
    // Every token produced one visible growth step (plus start and done).
    const distinct = contentSeen.filter((c, i) => i === 0 || c !== contentSeen[i - 1]);
    expect(distinct.length).toBeGreaterThanOrEqual(TOKENS.length);
    expect(contentSeen.every((c) => ANSWER.startsWith(c))).toBe(true);
  });

  it('assembles the answer from random chunkings (multi-byte characters split)', () => {
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let round = 0; round < 200; round++) {
      const cuts: number[] = [];
      let at = 0;
      while (at < bytes.length) {
        at += 1 + Math.floor(random() * 9);
        if (at < bytes.length) cuts.push(at);
      }
      expect(assemble(bytes, cuts).thread.messages[1].content).toBe(ANSWER);
    }
  });

  it('splits a multi-byte character across chunks without replacement characters', () => {
    const fire = new TextEncoder().encode('data: {"type":"token","text":"🔥"}\n');
    const decoder = new SseDataDecoder();
    const out = [...decoder.push(fire.subarray(0, 32)), ...decoder.push(fire.subarray(32, 33)), ...decoder.push(fire.subarray(33))];
    expect(out).toEqual(['{"type":"token","text":"🔥"}']);
    expect(out[0]).not.toContain('\uFFFD');
  });

  it('handles CRLF (also split between chunks), lone CR, comments and other fields', () => {
    const decoder = new SseDataDecoder();
    const enc = new TextEncoder();
    const out = [
      ...decoder.push(enc.encode(': keep-alive\r')),
      ...decoder.push(enc.encode('\nevent: message\r\nid: 7\r\ndata: one\r')),
      ...decoder.push(enc.encode('\n\r\ndata:two\rdata:  three\n')),
      ...decoder.push(enc.encode('retry: 10\n\n')),
    ];
    expect(out).toEqual(['one', 'two', ' three']);
  });

  it('delivers a last line that has no line break when the stream ends', () => {
    const decoder = new SseDataDecoder();
    expect(decoder.push(new TextEncoder().encode('data: {"a":1}\ndata: {"b":2}'))).toEqual(['{"a":1}']);
    expect(decoder.finish()).toEqual(['{"b":2}']);
  });

  it('does not deliver a line before it is complete', () => {
    const decoder = new SseDataDecoder();
    expect(decoder.push(new TextEncoder().encode('data: {"type":"tok'))).toEqual([]);
    expect(decoder.push(new TextEncoder().encode('en","text":"x"}\n'))).toEqual(['{"type":"token","text":"x"}']);
  });
});

describe('readSse', () => {
  it('reads a ReadableStream body chunk by chunk', async () => {
    const bytes = new TextEncoder().encode(sseBody(streamedEvents()));
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 5) controller.enqueue(bytes.subarray(i, i + 5));
        controller.close();
      },
    });
    let thread = emptyThread;
    await readSse(body, (data) => {
      const event = parseChatEvent(data);
      if (event) thread = applyChatEvent(thread, event);
    });
    expect(thread.messages[1].content).toBe(ANSWER);
  });
});

describe('parseChatEvent', () => {
  it('ignores unknown types and malformed payloads', () => {
    expect(parseChatEvent('{"type":"ping"}')).toBeNull();
    expect(parseChatEvent('not json')).toBeNull();
    expect(parseChatEvent('{"type":"token"}')).toBeNull();
    expect(parseChatEvent('[1,2]')).toBeNull();
  });

  it('reads an error with or without a message', () => {
    expect(parseChatEvent('{"type":"error","error":"model unloaded","message":null}')).toEqual({
      type: 'error',
      error: 'model unloaded',
      message: null,
    });
  });
});
