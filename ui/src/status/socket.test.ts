import { afterEach, describe, expect, it, vi } from 'vitest';
import { BACKOFF_BASE_MS, BACKOFF_MAX_MS, backoffDelay, CLOSE_POLICY, connectEvents } from './socket';

describe('backoffDelay', () => {
  it('doubles from the base up to the cap, minus at most 20 % jitter', () => {
    const none = () => 0;
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, none))).toEqual([500, 1000, 2000, 4000]);
    expect(backoffDelay(50, none)).toBe(BACKOFF_MAX_MS);
    expect(backoffDelay(0, () => 1)).toBe(BACKOFF_BASE_MS * 0.8);
  });
});

/** A stand-in WebSocket the test opens, fails and feeds by hand. */
class FakeSocket {
  static all: FakeSocket[] = [];
  onopen: (() => void) | null = null;
  onclose: ((ev?: { code: number }) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  closed = false;
  constructor(readonly url: string) {
    FakeSocket.all.push(this);
  }
  close() {
    this.closed = true;
    this.onclose?.();
  }
}

describe('connectEvents', () => {
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
    FakeSocket.all = [];
  });

  it('delivers parsed events, reconnects with backoff after a drop and stops when closed', () => {
    vi.useFakeTimers();
    vi.stubGlobal('WebSocket', FakeSocket);
    const events: unknown[] = [];
    const states: string[] = [];
    const close = connectEvents('ws://x/api/events', {
      onEvent: (e) => events.push(e),
      onConnection: (c) => states.push(c),
    });
    const first = FakeSocket.all[0];
    first.onopen?.();
    first.onmessage?.({ data: '{"type":"model","id":null,"state":"empty","progress":0}' });
    first.onmessage?.({ data: 'garbage' });
    expect(events).toHaveLength(1);

    first.onclose?.(); // the node went away
    expect(states).toEqual(['connecting', 'open', 'closed']);
    vi.advanceTimersByTime(BACKOFF_BASE_MS * 0.8 - 1);
    expect(FakeSocket.all).toHaveLength(1);
    vi.advanceTimersByTime(BACKOFF_BASE_MS);
    expect(FakeSocket.all).toHaveLength(2);

    FakeSocket.all[1].onclose?.(); // refused again: a longer wait
    vi.advanceTimersByTime(BACKOFF_BASE_MS);
    expect(FakeSocket.all).toHaveLength(2);
    vi.advanceTimersByTime(BACKOFF_BASE_MS * 2);
    expect(FakeSocket.all).toHaveLength(3);

    close();
    expect(FakeSocket.all[2].closed).toBe(true);
    vi.advanceTimersByTime(60_000);
    expect(FakeSocket.all).toHaveLength(3);
  });

  it('reads the URL at each connect and reports a 1008 close (an API key is needed)', () => {
    vi.useFakeTimers();
    vi.stubGlobal('WebSocket', FakeSocket);
    let token = 'old';
    let refused = 0;
    const close = connectEvents(() => `ws://x/api/events?token=${token}`, {
      onEvent: () => undefined,
      onConnection: () => undefined,
      onRefused: () => refused++,
    });
    FakeSocket.all[0].onclose?.({ code: 1006 });
    expect(refused).toBe(0);
    token = 'new';
    vi.advanceTimersByTime(BACKOFF_BASE_MS);
    expect(FakeSocket.all[1].url).toBe('ws://x/api/events?token=new');
    FakeSocket.all[1].onclose?.({ code: CLOSE_POLICY });
    expect(refused).toBe(1);
    close();
  });
});
