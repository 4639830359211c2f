/**
 * The `/api/events` WebSocket: connects, hands each parsed message to the caller and
 * reconnects with exponential backoff (reset once a connection opens) until closed.
 * The client never sends anything on it (docs/API.md). The URL may be a function, read at each
 * (re)connect (it carries the API key, which can change); a close with 1008 (the node wants a
 * key) is reported to `onRefused`, and the retries go on.
 */
import { parseLiveEvent, type LiveEvent } from '../api/types';
import type { Connection } from './live';

/** First retry after this long; doubles per failed attempt. */
export const BACKOFF_BASE_MS = 500;
/** Retries never wait longer than this: a restarted node is found within 10 s. */
export const BACKOFF_MAX_MS = 10_000;
/** The close code of a WebSocket refused for want of a valid API key. */
export const CLOSE_POLICY = 1008;

/** Delay before reconnect attempt `attempt` (0-based), with up to 20 % jitter from `random`. */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.min(attempt, 20));
  return Math.round(base * (1 - 0.2 * random()));
}

export interface EventSocketHandlers {
  onEvent: (event: LiveEvent) => void;
  onConnection: (connection: Connection) => void;
  /** The node closed the socket with 1008: it needs an API key (or a valid one). */
  onRefused?: () => void;
}

/** Opens the socket; the returned function closes it for good. */
export function connectEvents(url: string | (() => string), handlers: EventSocketHandlers): () => void {
  let socket: WebSocket | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let attempt = 0;
  let closed = false;

  const open = () => {
    timer = null;
    handlers.onConnection('connecting');
    let ws: WebSocket;
    try {
      ws = new WebSocket(typeof url === 'function' ? url() : url);
    } catch {
      scheduleRetry();
      return;
    }
    socket = ws;
    ws.onopen = () => {
      attempt = 0;
      handlers.onConnection('open');
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (typeof ev.data !== 'string') return;
      const event = parseLiveEvent(ev.data);
      if (event) handlers.onEvent(event);
    };
    ws.onclose = (ev?: CloseEvent) => {
      if (socket !== ws) return;
      socket = null;
      if (closed) return;
      handlers.onConnection('closed');
      if (ev?.code === CLOSE_POLICY) handlers.onRefused?.();
      scheduleRetry();
    };
  };

  const scheduleRetry = () => {
    if (closed || timer !== null) return;
    timer = setTimeout(open, backoffDelay(attempt++));
  };

  open();
  return () => {
    closed = true;
    if (timer !== null) clearTimeout(timer);
    const ws = socket;
    socket = null;
    ws?.close();
  };
}
