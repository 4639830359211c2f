// @vitest-environment jsdom
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Conversation, Message } from '../api/types';
import { message } from '../testSupport';
import { ChatStore, POLL_MS } from './store';

const conversation: Conversation = {
  id: 'c_1',
  title: 'New chat',
  created_at: 0,
  updated_at: 0,
  settings: { system_prompt: '', temperature: 0.8, top_p: 0.95, max_tokens: null },
};

/** A chat response body the test writes to line by line. */
function controlledStream() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
  });
  const enc = new TextEncoder();
  return {
    body,
    event: (e: unknown) => controller.enqueue(enc.encode(`data: ${JSON.stringify(e)}\n\n`)),
    end: () => controller.close(),
  };
}

interface Call {
  method: string;
  path: string;
  body: unknown;
}

/** Installs a fake `fetch`; `handle` answers each request. */
function fakeNode(handle: (call: Call) => Response | Promise<Response>): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init?: RequestInit) => {
      const call = {
        method: init?.method ?? 'GET',
        path: new URL(url).pathname + new URL(url).search,
        body: init?.body ? JSON.parse(String(init.body)) : undefined,
      };
      calls.push(call);
      return handle(call);
    }),
  );
  return calls;
}

const json = (value: unknown, status = 200) =>
  new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json' } });

const flush = () => new Promise((r) => setTimeout(r, 0));

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !check(); i++) await flush();
  expect(check()).toBe(true);
}

const user = message({ id: 'm_u', role: 'user', content: 'Tell me a story' });
const started = message({ id: 'm_a', role: 'assistant', status: 'streaming', model: 'M', node: 'n' });

describe('ChatStore', () => {
  beforeEach(() => vi.useRealTimers());
  afterEach(() => vi.unstubAllGlobals());

  it('shows the message at once, streams the answer, names the conversation', async () => {
    const stream = controlledStream();
    const calls = fakeNode((call) => {
      if (call.path.endsWith('/chat')) return new Response(stream.body, { status: 200 });
      if (call.method === 'PATCH') return json({ ...conversation, title: 'Tell me a story' });
      throw new Error(`unexpected ${call.method} ${call.path}`);
    });
    const activity = vi.fn();
    const store = new ChatStore({ onActivity: activity });
    store.adopt(conversation);

    const done = store.send('c_1', { content: 'Tell me a story' });
    expect(store.view('c_1').messages.map((m) => m.content)).toEqual(['Tell me a story']);
    expect(store.view('c_1').sending).toBe(true);

    stream.event({ type: 'user', message: user });
    stream.event({ type: 'start', message: started });
    stream.event({ type: 'token', text: 'Once' });
    await until(() => store.view('c_1').messages[1]?.content === 'Once');
    stream.event({ type: 'token', text: ' upon' });
    await until(() => store.view('c_1').messages[1]?.content === 'Once upon');
    const final: Message = { ...started, status: 'complete', content: 'Once upon', stats: { tokens: 2, tokens_per_s: 9, ttft_ms: 5 } };
    stream.event({ type: 'done', message: final });
    stream.end();
    await done;

    const view = store.view('c_1');
    expect(view.sending).toBe(false);
    expect(view.messages).toEqual([user, final]);
    expect(view.conversation?.title).toBe('Tell me a story');
    expect(calls.find((c) => c.path.endsWith('/chat'))?.body).toEqual({ content: 'Tell me a story' });
    expect(calls.find((c) => c.method === 'PATCH')?.body).toEqual({ title: 'Tell me a story' });
    expect(activity).toHaveBeenCalled();
  });

  it('sends attached images and clips and shows them from the page until the node has stored them', async () => {
    const stream = controlledStream();
    const calls = fakeNode((call) => {
      if (call.path.endsWith('/chat')) return new Response(stream.body, { status: 200 });
      return json(conversation);
    });
    const store = new ChatStore({ onActivity: () => undefined });
    store.adopt({ ...conversation, title: 'Pictures' });
    const png = 'data:image/png;base64,iVBORw0KGgo=';
    // Its payload happens to hold "mp3": the type is read from the head only.
    const wav = 'data:audio/wav;base64,UklGRiQAmp3XQVZF';
    const done = store.send('c_1', { content: 'What is this?', images: [png], audio: [wav] });
    const shown = store.view('c_1').messages[0].images ?? [];
    expect(shown.map((i) => [i.mime, i.local_url])).toEqual([['image/png', png]]);
    expect(shown[0].size).toBe(8);
    const heard = store.view('c_1').messages[0].audio ?? [];
    expect(heard.map((a) => [a.format, a.size, a.local_url])).toEqual([['wav', 12, wav]]);

    const stored = { ...user, content: 'What is this?', images: [{ id: 'i_1', mime: 'image/png', width: 1, height: 1, size: 8 }] };
    stream.event({ type: 'user', message: stored });
    stream.event({ type: 'done', message: { ...started, status: 'complete', content: 'A dot.' } });
    stream.end();
    expect(await done).toBe(true);
    expect(store.view('c_1').messages[0]).toEqual(stored);
    expect(calls.find((c) => c.path.endsWith('/chat'))?.body).toEqual({ content: 'What is this?', images: [png], audio: [wav] });
  });

  it('does not let a stored copy fetched mid-stream overwrite the streamed text', async () => {
    const stream = controlledStream();
    let releaseGet!: () => void;
    const gate = new Promise<void>((r) => (releaseGet = r));
    fakeNode(async (call) => {
      if (call.path.endsWith('/chat')) return new Response(stream.body);
      if (call.method === 'GET') {
        await gate;
        return json({ conversation: { ...conversation, title: 'x' }, messages: [user, { ...started, content: 'On' }] });
      }
      return json(conversation);
    });
    const store = new ChatStore({ onActivity: () => undefined });
    store.adopt({ ...conversation, title: 'x' });
    const done = store.send('c_1', { content: 'Tell me a story' });
    const load = store.load('c_1');
    stream.event({ type: 'user', message: user });
    stream.event({ type: 'start', message: started });
    stream.event({ type: 'token', text: 'Once' });
    stream.event({ type: 'done', message: { ...started, status: 'complete', content: 'Once' } });
    stream.end();
    await done;
    releaseGet();
    await load;
    expect(store.view('c_1').messages[1].content).toBe('Once');
    expect(store.view('c_1').messages[1].status).toBe('complete');
  });

  it('marks the answer interrupted when the stream breaks, then reloads the stored copy', async () => {
    const stream = controlledStream();
    const stored = { ...started, status: 'interrupted' as const, content: 'Once upon a' };
    fakeNode((call) => {
      if (call.path.endsWith('/chat')) return new Response(stream.body);
      if (call.method === 'GET') return json({ conversation, messages: [user, stored] });
      return json(conversation);
    });
    const store = new ChatStore({ onActivity: () => undefined });
    store.adopt({ ...conversation, title: 'x' });
    const done = store.send('c_1', { content: 'Tell me a story' });
    stream.event({ type: 'user', message: user });
    stream.event({ type: 'start', message: started });
    stream.event({ type: 'token', text: 'Once' });
    await until(() => store.view('c_1').messages[1]?.content === 'Once');
    stream.end(); // no done: the node died
    await done;
    const view = store.view('c_1');
    expect(view.error).toMatch(/connection/i);
    expect(view.messages[1]).toEqual(stored);
  });

  it('reports a 409 and restores the stored messages', async () => {
    fakeNode((call) => {
      if (call.path.endsWith('/chat')) return json({ error: { message: 'busy', code: 'CONFLICT' } }, 409);
      return json({ conversation, messages: [user, { ...started, content: 'x' }] });
    });
    const store = new ChatStore({ onActivity: () => undefined });
    await store.load('c_1');
    // Refused before anything was kept: the caller is told, to give the user their words back.
    expect(await store.send('c_1', { regenerate: true })).toBe(false);
    const view = store.view('c_1');
    expect(view.error).toMatch(/already streaming/);
    expect(view.messages.map((m) => m.id)).toEqual(['m_u', 'm_a']);
  });

  it('polls an answer streamed elsewhere until it is final, only while on screen', async () => {
    vi.useFakeTimers();
    let answer: Message = { ...started, content: 'Once' };
    const calls = fakeNode(() => json({ conversation, messages: [user, answer] }));
    const store = new ChatStore({ onActivity: () => undefined });
    store.setActive('c_1');
    await vi.advanceTimersByTimeAsync(0);
    expect(store.view('c_1').messages[1].status).toBe('streaming');
    answer = { ...answer, content: 'Once upon', status: 'interrupted' };
    await vi.advanceTimersByTimeAsync(POLL_MS);
    expect(store.view('c_1').messages[1]).toEqual(answer);
    const gets = calls.length;
    await vi.advanceTimersByTimeAsync(POLL_MS * 5);
    expect(calls.length).toBe(gets); // final: no more polling
    store.setActive(null);
  });
  it('a turn that stops for consent is not an error; a decision posts and the loop goes on', async () => {
    const pending = {
      id: 'call_1', name: 'files__read_file', server: 'files', tool: 'read_file', arguments: { path: 'a.md' },
      state: 'pending', consent: null, reason: null, outcome: null, error: null,
    };
    const first = controlledStream();
    const second = controlledStream();
    const calls = fakeNode((call) => {
      if (call.path.endsWith('/chat')) return new Response(first.body);
      if (call.path.includes('/tool_calls/')) return new Response(second.body);
      return json(conversation);
    });
    const store = new ChatStore({ onActivity: () => undefined });
    store.adopt({ ...conversation, title: 'x' });
    const sent = store.send('c_1', { content: 'Read a.md' });
    first.event({ type: 'user', message: user });
    first.event({ type: 'start', message: started });
    first.event({ type: 'tool_call', message_id: 'm_a', call: pending });
    first.event({ type: 'done', message: { ...started, status: 'complete', tool_calls: [pending] }, next: true });
    first.event({ type: 'consent', message_id: 'm_a', calls: ['call_1'] });
    first.end();
    expect(await sent).toBe(true);
    expect(store.view('c_1').error).toBeNull();
    expect(store.view('c_1').messages[1].tool_calls?.[0].state).toBe('pending');

    const decided = store.decide('c_1', 'call_1', 'deny', '  not that file ');
    expect(store.view('c_1').sending).toBe(true);
    const denied = { ...pending, state: 'denied', reason: 'not that file' };
    second.event({ type: 'tool_update', message_id: 'm_a', call: denied });
    second.event({ type: 'start', message: { ...started, id: 'm_b' } });
    second.event({ type: 'token', text: 'Fine.' });
    second.event({ type: 'done', message: { ...started, id: 'm_b', status: 'complete', content: 'Fine.' } });
    second.end();
    await decided;

    const view = store.view('c_1');
    expect(view.error).toBeNull();
    expect(view.sending).toBe(false);
    expect(view.messages.map((m) => [m.id, m.tool_calls?.[0]?.state ?? null, m.content])).toEqual([
      ['m_u', null, 'Tell me a story'],
      ['m_a', 'denied', ''],
      ['m_b', null, 'Fine.'],
    ]);
    const post = calls.find((c) => c.path.includes('/tool_calls/'));
    expect(post?.path).toBe('/api/conversations/c_1/tool_calls/call_1');
    expect(post?.body).toEqual({ decision: 'deny', reason: 'not that file' });
  });

  it('a decision refused with 409 says so and reloads the stored copy', async () => {
    fakeNode((call) => {
      if (call.path.includes('/tool_calls/')) return json({ error: { message: 'not waiting', code: 'conflict' } }, 409);
      return json({ conversation, messages: [user] });
    });
    const store = new ChatStore({ onActivity: () => undefined });
    await store.load('c_1');
    await store.decide('c_1', 'call_9', 'once');
    expect(store.view('c_1').error).toMatch(/no longer waits/);
  });
});
