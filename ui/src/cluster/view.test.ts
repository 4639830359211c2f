import { describe, expect, it } from 'vitest';
import type { ClusterPeer } from '../api/types';
import { addSample, checkAddress, HISTORY_MAX, HISTORY_MS, kindLabel, thermalTone } from './view';

function peer(addr: string, tokens_per_s = 0): ClusterPeer {
  return {
    name: addr,
    device_id: 'X',
    addr,
    kind: 'hearth',
    outbound: true,
    degraded: false,
    loaded_models: [],
    thermal_level: 'nominal',
    throttle: 100,
    queue_depth: 0,
    is_generating: false,
    silent_ms: 0,
    tokens_per_s,
  };
}

describe('checkAddress', () => {
  it('takes HOST:PORT and trims it', () => {
    expect(checkAddress(' 10.0.0.2:8421 ')).toEqual({ ok: true, address: '10.0.0.2:8421' });
    expect(checkAddress('studio.local:1')).toEqual({ ok: true, address: 'studio.local:1' });
    expect(checkAddress('[fe80::1]:8421').ok).toBe(true);
  });
  it('refuses what the node would refuse', () => {
    for (const bad of ['', 'host', 'host:', ':8421', 'h:0', 'h:65536', 'h:8x', 'a b:1']) {
      expect(checkAddress(bad).ok, bad).toBe(false);
    }
  });
});

describe('addSample', () => {
  it('keeps one sample a view per peer and drops gone peers', () => {
    let h = addSample({}, [peer('a', 10), peer('b')], 1000);
    h = addSample(h, [peer('a', 20)], 2000);
    expect(Object.keys(h)).toEqual(['a']);
    expect(h.a.map((s) => s.tokensPerS)).toEqual([10, 20]);
  });
  it('is bounded in time and in length', () => {
    let h = addSample({}, [peer('a')], 0);
    h = addSample(h, [peer('a')], HISTORY_MS + 1);
    expect(h.a.length).toBe(1);
    for (let t = 1; t <= HISTORY_MAX + 50; t++) h = addSample(h, [peer('a')], HISTORY_MS + 1 + t);
    expect(h.a.length).toBe(HISTORY_MAX);
  });
});

describe('labels', () => {
  it('says which traffic is encrypted', () => {
    expect(kindLabel('hearth')).toContain('encrypted');
    expect(kindLabel('tealenet')).toContain('plain text');
  });
  it('tones thermal levels', () => {
    expect(thermalTone('nominal')).toBe('ok');
    expect(thermalTone('critical')).toBe('bad');
  });
});
