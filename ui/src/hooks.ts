/**
 * React glue: the hash route, the chat store's views, the live `/api/events` state, the
 * conversation list and whether the node wants an API key. Each hook only wires a pure module
 * or store to React.
 */
import { useCallback, useEffect, useReducer, useRef, useState, useSyncExternalStore, type Dispatch } from 'react';
import { authState, reportUnauthorized, subscribeAuth, type AuthState } from './api/auth';
import { eventsUrl } from './api/base';
import { api, errorText } from './api/client';
import { currentToken } from './api/token';
import type { Conversation } from './api/types';
import { holdStoredFile } from './chat/attachments';
import type { ChatStore, ThreadView } from './chat/store';
import { parseHash, type Route } from './route';
import { initialLive, liveReducer, type LiveAction, type LiveState } from './status/live';
import { connectEvents } from './status/socket';

export function useRoute(): Route {
  const [hash, setHash] = useState(() => window.location.hash);
  useEffect(() => {
    const onChange = () => setHash(window.location.hash);
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return parseHash(hash);
}

export function navigate(hash: string): void {
  if (window.location.hash !== hash) window.location.hash = hash;
}

export function useThread(store: ChatStore, id: string | null): ThreadView {
  return useSyncExternalStore(store.subscribe, () => store.view(id));
}

/** The node's live state: the first `GET /api/status`, then the `/api/events` socket. */
export function useLive(): [LiveState, Dispatch<LiveAction>] {
  const [live, dispatch] = useReducer(liveReducer, initialLive);
  useEffect(() => {
    let cancelled = false;
    api
      .status()
      .then((status) => {
        if (!cancelled) dispatch({ kind: 'status', status });
      })
      .catch(() => {
        // The socket reports the connection state; nothing more to say here.
      });
    const close = connectEvents(eventsUrl, {
      onEvent: (event) => dispatch({ kind: 'event', event }),
      onConnection: (connection) => dispatch({ kind: 'connection', connection }),
      onRefused: () => reportUnauthorized(currentToken() !== null),
    });
    return () => {
      cancelled = true;
      close();
    };
  }, []);
  return [live, dispatch];
}

/** Whether the node has refused this browser for want of an API key (`api/auth.ts`). */
export function useAuth(): AuthState {
  return useSyncExternalStore(subscribeAuth, authState);
}

/**
 * `value`, but changing at most once per `intervalMs` (the latest value always arrives, on the
 * trailing edge). With `intervalMs <= 0` it is `value` itself, with no delay.
 */
export function useThrottled<T>(value: T, intervalMs: number): T {
  const [shown, setShown] = useState(value);
  const lastShown = useRef(0);
  useEffect(() => {
    if (intervalMs <= 0) return;
    const wait = lastShown.current + intervalMs - Date.now();
    const show = () => {
      lastShown.current = Date.now();
      setShown(value);
    };
    if (wait <= 0) {
      show();
      return;
    }
    const timer = setTimeout(show, wait);
    return () => clearTimeout(timer);
  }, [value, intervalMs]);
  return intervalMs <= 0 ? value : shown;
}

/** Waits this long after the last keystroke before searching. */
const SEARCH_DEBOUNCE_MS = 250;

export interface ConversationList {
  items: Conversation[];
  loaded: boolean;
  error: string | null;
  query: string;
  setQuery: (q: string) => void;
  refresh: () => Promise<void>;
}

export function useConversationList(): ConversationList {
  const [items, setItems] = useState<Conversation[]>([]);
  const [loaded, setLoaded] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [query, setQuery] = useState('');
  const queryRef = useRef(query);

  const refresh = useCallback(async () => {
    const q = queryRef.current;
    try {
      const list = await api.listConversations(q);
      if (queryRef.current !== q) return; // a newer search is on its way
      setItems(list);
      setError(null);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setLoaded(true);
    }
  }, []);

  useEffect(() => {
    queryRef.current = query;
    const timer = setTimeout(() => void refresh(), query ? SEARCH_DEBOUNCE_MS : 0);
    return () => clearTimeout(timer);
  }, [query, refresh]);

  return { items, loaded, error, query, setQuery, refresh };
}

/**
 * A stored file's object URL (`local`, a file of this page, when there is one): fetched with
 * the API key once while shown, given back a while after no view shows it
 * ([`holdStoredFile`]).
 */
export function useStoredFile(
  local: string | undefined,
  path: string,
): { url: string | null; failed: string | null } {
  const [url, setUrl] = useState<string | null>(local ?? null);
  const [failed, setFailed] = useState<string | null>(null);
  useEffect(() => {
    if (local) return;
    let live = true;
    const held = holdStoredFile(path);
    held.url.then(
      (u) => live && setUrl(u),
      (e: unknown) => live && setFailed(e instanceof Error ? e.message : String(e)),
    );
    return () => {
      live = false;
      held.release();
    };
  }, [path, local]);
  return { url, failed };
}
