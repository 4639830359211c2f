/**
 * Where the node's API lives: the one place that decides it.
 *
 * - Served by the node (`http://host:port/`): the same origin.
 * - Shown by the Tauri window (`tauri://localhost`, or `http://tauri.localhost` where the
 *   webview maps custom protocols to http): the desktop shell knows the node's address
 *   (`invoke('node_url')`, asked once at startup by `initApiBase`); without an answer, the
 *   node's default address.
 * - A `?api=http://host:port` query parameter overrides all of these (only http/https URLs).
 *
 * `initApiBase()` runs once before the first API call; after it `apiBase()` is synchronous.
 * The WebSocket URL is derived from the same base (http -> ws, https -> wss) and carries the
 * API key as `?token=` (see `token.ts`).
 */
import { currentToken, withTokenParam } from './token';

export const TAURI_DEFAULT_API = 'http://127.0.0.1:8420';
/** How long the desktop shell may take to name the node before the default is used. */
export const TAURI_INVOKE_TIMEOUT_MS = 3_000;

/** The parts of `window.location` the decision needs (a plain object in tests). */
export interface PageLocation {
  protocol: string;
  hostname: string;
  origin: string;
  search: string;
}

/** The part of Tauri's global API (`window.__TAURI__`, v2) used here. */
export interface TauriGlobal {
  core?: { invoke?: (cmd: string, args?: Record<string, unknown>) => Promise<unknown> };
}

/** The parts of `window` the asynchronous decision needs. */
export interface PageWindow {
  location: PageLocation;
  __TAURI__?: TauriGlobal;
}

function apiOverride(loc: PageLocation): string | null {
  const override = new URLSearchParams(loc.search).get('api');
  return override && isHttpUrl(override) ? stripTrailingSlash(override) : null;
}

export function isTauriPage(loc: PageLocation): boolean {
  return loc.protocol === 'tauri:' || loc.hostname === 'tauri.localhost';
}

/** The synchronous rule (no desktop shell to ask). */
export function resolveApiBase(loc: PageLocation): string {
  const override = apiOverride(loc);
  if (override) return override;
  if (isTauriPage(loc)) return TAURI_DEFAULT_API;
  return stripTrailingSlash(loc.origin);
}

/**
 * The full rule: as `resolveApiBase`, but inside Tauri the shell's `node_url` command names the
 * node when it can (an http(s) URL within `timeoutMs`); anything else falls back to the default.
 */
export async function resolveApiBaseAsync(win: PageWindow, timeoutMs = TAURI_INVOKE_TIMEOUT_MS): Promise<string> {
  const loc = win.location;
  const override = apiOverride(loc);
  if (override) return override;
  if (!isTauriPage(loc)) return resolveApiBase(loc);
  const invoke = win.__TAURI__?.core?.invoke;
  if (typeof invoke !== 'function') return TAURI_DEFAULT_API;
  try {
    const url = await withTimeout(Promise.resolve(invoke('node_url')), timeoutMs);
    if (typeof url === 'string' && isHttpUrl(url.trim())) return stripTrailingSlash(url.trim());
  } catch {
    // The shell has no such command, failed or did not answer: use the default.
  }
  return TAURI_DEFAULT_API;
}

/** `http(s)://host/prefix` + `/api/events` -> `ws(s)://host/prefix/api/events`. */
export function toWebSocketUrl(base: string, path: string): string {
  const url = new URL(base + path);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.toString();
}

function isHttpUrl(s: string): boolean {
  return /^https?:\/\/[^/?#\s]+/i.test(s);
}

function stripTrailingSlash(s: string): string {
  return s.replace(/\/+$/, '');
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out')), ms);
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

let cachedBase: string | undefined;
let initializing: Promise<string> | undefined;

/** Decides the API base once, asking the desktop shell if there is one; call before rendering. */
export function initApiBase(win: PageWindow = window as unknown as PageWindow): Promise<string> {
  initializing ??= resolveApiBaseAsync(win).then((base) => {
    cachedBase = base;
    return base;
  });
  return initializing;
}

/** The API base for this page (the synchronous rule if `initApiBase` has not finished). */
export function apiBase(): string {
  cachedBase ??= resolveApiBase(window.location);
  return cachedBase;
}

/** Forgets the decision (for tests). */
export function resetApiBase(): void {
  cachedBase = undefined;
  initializing = undefined;
}

export function apiUrl(path: string): string {
  return apiBase() + path;
}

/** The `/api/events` WebSocket URL, with this page's key; read again at each (re)connect. */
export function eventsUrl(): string {
  return withTokenParam(toWebSocketUrl(apiBase(), '/api/events'), currentToken());
}
