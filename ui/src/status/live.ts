/**
 * The node's live state as the UI knows it, built only by `liveReducer(state, action)` from
 * `/api/events` messages, the first `GET /api/status` and the connection's ups and downs.
 *
 * - `history` keeps one sample per telemetry snapshot for the last `HISTORY_WINDOW_MS`
 *   (measured on the node's clock, so a skewed client clock does not matter), and never more
 *   than `MAX_SAMPLES`, whatever rate the node sends at.
 * - `model` follows both the `model` events (progress while loading) and the snapshots.
 * - `paused` is the snapshot's (a node that does not send it is taken as not paused).
 */
import type { LiveEvent, ModelStatus, StatusResponse, TelemetrySnapshot, Thermal } from '../api/types';

/** The sparklines show five minutes. */
export const HISTORY_WINDOW_MS = 5 * 60 * 1000;
/** Five minutes at the documented 1 Hz, with room for a faster node; bounds memory. */
export const MAX_SAMPLES = 600;

export type Connection = 'connecting' | 'open' | 'closed';

export interface Sample {
  time: number;
  tokens_per_s: number;
  active: number;
  queued: number;
  cpu_percent: number;
  memory_used: number;
  thermal_value: number;
  throttle: number;
}

export interface LiveState {
  connection: Connection;
  node: string | null;
  model: ModelStatus;
  slots: number | null;
  active: number | null;
  queued: number | null;
  tokens_per_s: number | null;
  thermal: Thermal | null;
  throttle: number | null;
  /** Serving paused from the desktop app's tray; `null` until the first snapshot. */
  paused: boolean | null;
  cpu_percent: number | null;
  memory: { used_bytes: number; total_bytes: number } | null;
  history: Sample[];
}

export type LiveAction =
  | { kind: 'event'; event: LiveEvent }
  | { kind: 'status'; status: StatusResponse }
  | { kind: 'connection'; connection: Connection }
  /** The user asked for a load: show it as loading before the node's first event. */
  | { kind: 'load-requested'; id: string };

export const initialLive: LiveState = {
  connection: 'connecting',
  node: null,
  model: { id: null, state: 'empty', progress: 0 },
  slots: null,
  active: null,
  queued: null,
  tokens_per_s: null,
  thermal: null,
  throttle: null,
  paused: null,
  cpu_percent: null,
  memory: null,
  history: [],
};

export function liveReducer(state: LiveState, action: LiveAction): LiveState {
  switch (action.kind) {
    case 'connection':
      return state.connection === action.connection ? state : { ...state, connection: action.connection };
    case 'load-requested':
      return { ...state, model: { id: action.id, state: 'loading', progress: 0 } };
    case 'status': {
      const s = action.status;
      return { ...state, node: s.node, model: s.model, slots: s.slots, active: s.active, queued: s.queued };
    }
    case 'event':
      return action.event.type === 'status'
        ? applySnapshot(state, action.event)
        : {
            ...state,
            model: {
              id: action.event.id,
              state: action.event.state,
              progress: action.event.progress,
              ...(action.event.error ? { error: action.event.error } : {}),
              ...(action.event.placement ? { placement: action.event.placement } : {}),
              ...(action.event.vision !== undefined ? { vision: action.event.vision } : {}),
              ...(action.event.audio !== undefined ? { audio: action.event.audio } : {}),
            },
          };
  }
}

function applySnapshot(state: LiveState, snap: TelemetrySnapshot): LiveState {
  return {
    ...state,
    connection: 'open',
    node: snap.node,
    model: snap.model,
    slots: snap.slots,
    active: snap.active,
    queued: snap.queued,
    tokens_per_s: snap.tokens_per_s,
    thermal: snap.thermal ?? null,
    throttle: snap.throttle,
    paused: snap.paused === true,
    cpu_percent: snap.cpu_percent,
    memory: snap.memory ?? null,
    history: appendSample(state.history, sampleOf(snap)),
  };
}

export function sampleOf(snap: TelemetrySnapshot): Sample {
  return {
    time: snap.time,
    tokens_per_s: snap.tokens_per_s ?? 0,
    active: snap.active ?? 0,
    queued: snap.queued ?? 0,
    cpu_percent: snap.cpu_percent ?? 0,
    memory_used: snap.memory?.used_bytes ?? 0,
    thermal_value: snap.thermal?.value ?? 0,
    throttle: snap.throttle ?? 0,
  };
}

/** Adds a sample and drops those older than the window (relative to the newest) or over the cap. */
export function appendSample(history: Sample[], sample: Sample): Sample[] {
  const cutoff = sample.time - HISTORY_WINDOW_MS;
  const kept = history.filter((s) => s.time >= cutoff && s.time <= sample.time);
  kept.push(sample);
  return kept.length > MAX_SAMPLES ? kept.slice(kept.length - MAX_SAMPLES) : kept;
}
