/**
 * Pure helpers of the Cluster page: the address check (as the node's: `HOST:PORT`, a port of
 * 1-65535, no spaces), the bounded five-minute history of each peer's figures (kept by peer
 * address, dropped once the peer is gone), and the labels of a peer's kind and thermal level.
 */
import type { ClusterPeer } from '../api/types';

export const HISTORY_MS = 5 * 60_000;
/** At most this many samples per peer (one a second for five minutes). */
export const HISTORY_MAX = 300;

export type AddressCheck = { ok: true; address: string } | { ok: false; error: string };

export function checkAddress(raw: string): AddressCheck {
  const address = raw.trim();
  const bad: AddressCheck = { ok: false, error: 'Type the peer as HOST:PORT, for example 192.168.1.20:8421.' };
  if (!address || /\s/.test(address) || address.length > 260) return bad;
  const i = address.lastIndexOf(':');
  if (i <= 0) return bad;
  const port = Number(address.slice(i + 1));
  if (!/^\d+$/.test(address.slice(i + 1)) || port < 1 || port > 65535) return bad;
  return { ok: true, address };
}

export interface PeerSample {
  time: number;
  tokensPerS: number;
  queue: number;
  throttle: number;
}

export type PeerHistory = Record<string, PeerSample[]>;

/** The history after a new view of the peers at `time`: one sample each, gone peers dropped. */
export function addSample(history: PeerHistory, peers: readonly ClusterPeer[], time: number): PeerHistory {
  const next: PeerHistory = {};
  for (const p of peers) {
    const kept = (history[p.addr] ?? []).filter((s) => s.time > time - HISTORY_MS && s.time < time);
    kept.push({ time, tokensPerS: p.tokens_per_s, queue: p.queue_depth, throttle: p.throttle });
    next[p.addr] = kept.slice(-HISTORY_MAX);
  }
  return next;
}

export function kindLabel(kind: string): string {
  return kind === 'hearth' ? 'Hearth · encrypted' : 'TealeNet · plain text';
}

const THERMAL_TONE: Record<string, string> = { nominal: 'ok', fair: 'warn', serious: 'bad', critical: 'bad' };

export function thermalTone(level: string): string {
  return THERMAL_TONE[level] ?? 'warn';
}
