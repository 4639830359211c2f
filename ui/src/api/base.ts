/**
 * Where the node's API lives: the one place that decides it.
 *
 * - Served by the node (`http://host:port/`): the same origin.
 * - Shown by the Tauri window (`tauri://localhost`, or `http://tauri.localhost` where the
 *   webview maps custom protocols to http): the node's default address.
 * - A `?api=http://host:port` query parameter overrides both (only http/https URLs count).
 *
 * The WebSocket URL is derived from the same base (http -> ws, https -> wss).
 */

export const TAURI_DEFAULT_API = 'http://127.0.0.1:8420';

/** The parts of `window.location` the decision needs (a plain object in tests). */
export interface PageLocation {
  protocol: string;
  hostname: string;
  origin: string;
  search: string;
}

export function resolveApiBase(loc: PageLocation): string {
  const override = new URLSearchParams(loc.search).get('api');
  if (override && /^https?:\/\//i.test(override)) return stripTrailingSlash(override);
  if (loc.protocol === 'tauri:' || loc.hostname === 'tauri.localhost') return TAURI_DEFAULT_API;
  return stripTrailingSlash(loc.origin);
}

/** `http(s)://host/prefix` + `/api/events` -> `ws(s)://host/prefix/api/events`. */
export function toWebSocketUrl(base: string, path: string): string {
  const url = new URL(base + path);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.toString();
}

function stripTrailingSlash(s: string): string {
  return s.replace(/\/+$/, '');
}

let cachedBase: string | undefined;

/** The API base for this page, computed once. */
export function apiBase(): string {
  cachedBase ??= resolveApiBase(window.location);
  return cachedBase;
}

export function apiUrl(path: string): string {
  return apiBase() + path;
}

export function eventsUrl(): string {
  return toWebSocketUrl(apiBase(), '/api/events');
}
