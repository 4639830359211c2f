/**
 * Whether the node has refused this browser for want of an API key: any API call answering
 * 401 (or the `/api/events` socket closed with 1008) reports it here, and the app shows the
 * key panel instead of its pages until the user retries. A tiny external store for
 * `useSyncExternalStore`: `authState()` returns the same object until something changes.
 */

export interface AuthState {
  /** The node answered 401: the pages cannot work without a (valid) key. */
  required: boolean;
  /** A key was sent with the refused request: it is wrong or was revoked. */
  keyRefused: boolean;
}

const initial: AuthState = { required: false, keyRefused: false };
let state: AuthState = initial;
const listeners = new Set<() => void>();

function set(next: AuthState): void {
  if (next.required === state.required && next.keyRefused === state.keyRefused) return;
  state = next;
  for (const l of [...listeners]) l();
}

export function authState(): AuthState {
  return state;
}

export function subscribeAuth(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** A request was refused with 401; `sentKey`: whether it carried a key. */
export function reportUnauthorized(sentKey: boolean): void {
  set({ required: true, keyRefused: sentKey });
}

/** The user retries (with a new key or the same): show the pages again. */
export function resetAuth(): void {
  set(initial);
}
