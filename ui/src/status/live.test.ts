import { describe, expect, it } from 'vitest';
import type { TelemetrySnapshot } from '../api/types';
import { appendSample, HISTORY_WINDOW_MS, initialLive, liveReducer, MAX_SAMPLES, sampleOf, type LiveState } from './live';

function snapshot(time: number, overrides: Partial<TelemetrySnapshot> = {}): TelemetrySnapshot {
  return {
    type: 'status',
    time,
    model: { id: 'SmolLM2', state: 'ready', progress: 1 },
    node: 'box',
    slots: 2,
    active: 1,
    queued: 0,
    tokens_per_s: 80,
    thermal: { level: 'nominal', source: 'estimated', value: 3.2 },
    throttle: 100,
    cpu_percent: 50,
    memory: { used_bytes: 1000, total_bytes: 4000 },
    ...overrides,
  };
}

const feed = (state: LiveState, snaps: TelemetrySnapshot[]) =>
  snaps.reduce((s, event) => liveReducer(s, { kind: 'event', event }), state);

describe('liveReducer: telemetry', () => {
  it('takes the latest values from a snapshot and records a sample', () => {
    const s = feed(initialLive, [snapshot(1000, { active: 2, tokens_per_s: 91.5 })]);
    expect(s.connection).toBe('open');
    expect(s.active).toBe(2);
    expect(s.slots).toBe(2);
    expect(s.tokens_per_s).toBe(91.5);
    expect(s.thermal?.source).toBe('estimated');
    expect(s.history).toEqual([sampleOf(snapshot(1000, { active: 2, tokens_per_s: 91.5 }))]);
  });

  it('keeps only the last five minutes of samples, by the node clock', () => {
    const start = 1_700_000_000_000;
    const snaps = Array.from({ length: 400 }, (_, i) => snapshot(start + i * 1000));
    const s = feed(initialLive, snaps);
    const newest = start + 399 * 1000;
    expect(s.history.at(-1)?.time).toBe(newest);
    expect(s.history[0].time).toBe(newest - HISTORY_WINDOW_MS);
    expect(s.history).toHaveLength(HISTORY_WINDOW_MS / 1000 + 1);
    expect(s.history.every((x) => newest - x.time <= HISTORY_WINDOW_MS)).toBe(true);
  });

  it('never keeps more than MAX_SAMPLES, however fast snapshots come', () => {
    let history = [sampleOf(snapshot(0))];
    for (let i = 1; i < MAX_SAMPLES * 3; i++) history = appendSample(history, sampleOf(snapshot(i * 10)));
    expect(history).toHaveLength(MAX_SAMPLES);
    expect(history.at(-1)?.time).toBe((MAX_SAMPLES * 3 - 1) * 10);
  });

  it('drops samples from the future when the node clock jumps back', () => {
    const s = feed(initialLive, [snapshot(10_000), snapshot(20_000), snapshot(15_000)]);
    expect(s.history.map((x) => x.time)).toEqual([10_000, 15_000]);
  });

  it('follows paused serving, taking a node that does not say as not paused', () => {
    expect(initialLive.paused).toBeNull();
    let s = feed(initialLive, [snapshot(1, { paused: true, throttle: 0 })]);
    expect(s.paused).toBe(true);
    expect(s.throttle).toBe(0);
    s = feed(s, [snapshot(2, { paused: false, throttle: 100 })]);
    expect(s.paused).toBe(false);
    const old = { ...snapshot(3, { paused: true }), paused: undefined } as TelemetrySnapshot;
    expect(feed(s, [old]).paused).toBe(false);
  });

  it('survives a snapshot without thermal or memory', () => {
    const partial = { ...snapshot(5), thermal: undefined, memory: undefined } as unknown as TelemetrySnapshot;
    const s = feed(initialLive, [partial]);
    expect(s.thermal).toBeNull();
    expect(s.history[0].memory_used).toBe(0);
  });
});

describe('liveReducer: model loading', () => {
  it('follows load progress events to ready', () => {
    let s = liveReducer(initialLive, { kind: 'load-requested', id: 'M' });
    expect(s.model).toEqual({ id: 'M', state: 'loading', progress: 0 });
    for (const progress of [0.1, 0.42, 0.99]) {
      s = liveReducer(s, { kind: 'event', event: { type: 'model', id: 'M', state: 'loading', progress } });
      expect(s.model.progress).toBe(progress);
      expect(s.model.state).toBe('loading');
    }
    s = liveReducer(s, { kind: 'event', event: { type: 'model', id: 'M', state: 'ready', progress: 1 } });
    expect(s.model).toEqual({ id: 'M', state: 'ready', progress: 1 });
  });

  it('keeps where a ready model computes from its own event', () => {
    const placement = {
      backend: 'CPU',
      devices: [],
      device_descriptions: [],
      layers: 0,
      layers_total: 31,
      vram_bytes: 0,
    };
    const s = liveReducer(initialLive, {
      kind: 'event',
      event: { type: 'model', id: 'M', state: 'ready', progress: 1, placement },
    });
    expect(s.model).toEqual({ id: 'M', state: 'ready', progress: 1, placement });
  });

  it('keeps what a ready model takes in from its own event', () => {
    const s = liveReducer(initialLive, {
      kind: 'event',
      event: { type: 'model', id: 'M', state: 'ready', progress: 1, vision: false, audio: true },
    });
    expect(s.model).toEqual({ id: 'M', state: 'ready', progress: 1, vision: false, audio: true });
  });

  it('keeps the error of a failed load and shows an unload as empty', () => {
    let s = liveReducer(initialLive, {
      kind: 'event',
      event: { type: 'model', id: 'M', state: 'failed', progress: 0.3, error: 'bad magic' },
    });
    expect(s.model.error).toBe('bad magic');
    s = liveReducer(s, { kind: 'event', event: { type: 'model', id: null, state: 'empty', progress: 0 } });
    expect(s.model).toEqual({ id: null, state: 'empty', progress: 0 });
  });

  it('takes the model from GET /api/status and from snapshots', () => {
    let s = liveReducer(initialLive, {
      kind: 'status',
      status: {
        model: { id: 'A', state: 'ready', progress: 1 },
        node: 'n',
        slots: 4,
        active: 0,
        queued: 0,
        tokens_generated: 0,
        requests_finished: 0,
      },
    });
    expect(s.model.id).toBe('A');
    expect(s.node).toBe('n');
    s = feed(s, [snapshot(1, { model: { id: 'B', state: 'loading', progress: 0.5 } })]);
    expect(s.model).toEqual({ id: 'B', state: 'loading', progress: 0.5 });
  });

  it('records the connection state without touching the rest', () => {
    const open = feed(initialLive, [snapshot(1)]);
    const closed = liveReducer(open, { kind: 'connection', connection: 'closed' });
    expect(closed.connection).toBe('closed');
    expect(closed.history).toBe(open.history);
    expect(liveReducer(closed, { kind: 'connection', connection: 'closed' })).toBe(closed);
  });
});
