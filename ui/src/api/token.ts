/**
 * The API key a browser on another machine uses (docs/API.md, "Access from other machines").
 *
 * - A page opened as `…/?token=<key>` keeps the key (localStorage `hearth.token`) and drops
 *   it from the visible URL, so it does not stay in the address bar, history or a shared link.
 * - Every API fetch sends it as `Authorization: Bearer <key>`; the `/api/events` WebSocket,
 *   which cannot carry headers, as `?token=<key>`.
 *
 * The functions taking a storage or a URL are pure (tested without a DOM); `currentToken`,
 * `setToken` and `adoptTokenFromPage` hold the one key of this page.
 */

export const TOKEN_STORAGE_KEY = 'hearth.token';
export const TOKEN_PARAM = 'token';

/** The parts of `localStorage` used here (a plain object in tests). */
export interface TokenStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/**
 * A key as typed or pasted: trimmed, and `null` unless it is printable ASCII without spaces
 * (anything else could not be sent in a header and is not a key).
 */
export function normalizeToken(raw: string | null | undefined): string | null {
  const t = (raw ?? '').trim();
  return /^[\x21-\x7e]+$/.test(t) ? t : null;
}

/** The key in a query string (`?token=…`), or `null`. */
export function tokenFromSearch(search: string): string | null {
  return normalizeToken(new URLSearchParams(search).get(TOKEN_PARAM));
}

/**
 * `href` without its `token` parameter (other parameters such as `?api=`, and the hash, stay),
 * or `null` when it has none.
 */
export function urlWithoutToken(href: string): string | null {
  const url = new URL(href);
  if (!url.searchParams.has(TOKEN_PARAM)) return null;
  url.searchParams.delete(TOKEN_PARAM);
  return url.toString();
}

/** The stored key; `null` when there is none or storage is unavailable. */
export function readToken(storage: TokenStorage | null): string | null {
  try {
    return normalizeToken(storage?.getItem(TOKEN_STORAGE_KEY));
  } catch {
    return null;
  }
}

/** Stores (or, with `null`, forgets) the key; false when storage refused. */
export function writeToken(storage: TokenStorage | null, token: string | null): boolean {
  if (!storage) return false;
  try {
    if (token === null) storage.removeItem(TOKEN_STORAGE_KEY);
    else storage.setItem(TOKEN_STORAGE_KEY, token);
    return true;
  } catch {
    return false;
  }
}

/** The headers that carry the key on a fetch (none without a key). */
export function authHeaders(token: string | null): Record<string, string> {
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** A WebSocket URL with `?token=<key>` set (unchanged without a key). */
export function withTokenParam(url: string, token: string | null): string {
  if (!token) return url;
  const u = new URL(url);
  u.searchParams.set(TOKEN_PARAM, token);
  return u.toString();
}

// ---- this page's key ----

function pageStorage(): TokenStorage | null {
  try {
    return typeof localStorage === 'undefined' ? null : localStorage;
  } catch {
    // Storage disabled for this origin.
    return null;
  }
}

let current: string | null | undefined;

/** This page's key (read from storage the first time). */
export function currentToken(): string | null {
  if (current === undefined) current = readToken(pageStorage());
  return current;
}

/** Replaces this page's key and stores it (kept in memory even when storage refuses). */
export function setToken(token: string | null): void {
  current = token;
  writeToken(pageStorage(), token);
}

/** The parts of `window` that `adoptTokenFromPage` uses. */
export interface TokenPage {
  location: { href: string; search: string };
  history: { state: unknown; replaceState(data: unknown, unused: string, url?: string): void };
}

/**
 * At startup: keeps a `?token=` from the page URL (it replaces a stored key) and removes it
 * from the address bar. Returns the key taken from the URL, or `null`.
 */
export function adoptTokenFromPage(page: TokenPage): string | null {
  const token = tokenFromSearch(page.location.search);
  if (token) setToken(token);
  const clean = urlWithoutToken(page.location.href);
  if (clean !== null) {
    try {
      page.history.replaceState(page.history.state, '', clean);
    } catch {
      // A page that may not rewrite its URL keeps it; the key is stored either way.
    }
  }
  return token;
}
