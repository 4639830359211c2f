import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  adoptTokenFromPage,
  authHeaders,
  currentToken,
  normalizeToken,
  readToken,
  setToken,
  TOKEN_STORAGE_KEY,
  tokenFromSearch,
  urlWithoutToken,
  withTokenParam,
  writeToken,
  type TokenPage,
  type TokenStorage,
} from './token';

/** A Map-backed stand-in for localStorage. */
function memoryStorage(initial: Record<string, string> = {}): TokenStorage & { data: Map<string, string> } {
  const data = new Map(Object.entries(initial));
  return {
    data,
    getItem: (k) => data.get(k) ?? null,
    setItem: (k, v) => void data.set(k, v),
    removeItem: (k) => void data.delete(k),
  };
}

const broken: TokenStorage = {
  getItem: () => {
    throw new Error('SecurityError');
  },
  setItem: () => {
    throw new Error('QuotaExceededError');
  },
  removeItem: () => {
    throw new Error('SecurityError');
  },
};

describe('reading a key from the URL', () => {
  it('takes ?token= and accepts only a plausible key', () => {
    expect(tokenFromSearch('?token=hearth_abc123')).toBe('hearth_abc123');
    expect(tokenFromSearch('?api=http://x:1&token=%20hearth_x%20')).toBe('hearth_x');
    expect(tokenFromSearch('?token=')).toBeNull();
    expect(tokenFromSearch('?token=two%20words')).toBeNull();
    expect(tokenFromSearch('')).toBeNull();
    expect(normalizeToken('  k\n')).toBe('k');
    expect(normalizeToken('clé')).toBeNull();
  });

  it('removes only the token from the URL, keeping other parameters and the hash', () => {
    expect(urlWithoutToken('http://192.168.1.20:8420/?token=hearth_x#/status')).toBe('http://192.168.1.20:8420/#/status');
    expect(urlWithoutToken('http://h:1/?api=http%3A%2F%2Fn%3A2&token=k#/c/c_1')).toBe(
      'http://h:1/?api=http%3A%2F%2Fn%3A2#/c/c_1',
    );
    expect(urlWithoutToken('http://h:1/?token=#/')).toBe('http://h:1/#/');
    expect(urlWithoutToken('http://h:1/?api=x#/')).toBeNull();
  });
});

describe('storage', () => {
  it('stores, reads and forgets the key under hearth.token', () => {
    const s = memoryStorage();
    expect(readToken(s)).toBeNull();
    expect(writeToken(s, 'hearth_k')).toBe(true);
    expect(s.data.get(TOKEN_STORAGE_KEY)).toBe('hearth_k');
    expect(readToken(s)).toBe('hearth_k');
    expect(writeToken(s, null)).toBe(true);
    expect(readToken(s)).toBeNull();
  });

  it('survives storage that is missing, throws or holds junk', () => {
    expect(readToken(null)).toBeNull();
    expect(writeToken(null, 'k')).toBe(false);
    expect(readToken(broken)).toBeNull();
    expect(writeToken(broken, 'k')).toBe(false);
    expect(readToken(memoryStorage({ [TOKEN_STORAGE_KEY]: '   ' }))).toBeNull();
  });
});

describe('sending the key', () => {
  it('builds the Authorization header', () => {
    expect(authHeaders('hearth_k')).toEqual({ authorization: 'Bearer hearth_k' });
    expect(authHeaders(null)).toEqual({});
  });

  it('adds ?token= to a WebSocket URL', () => {
    expect(withTokenParam('ws://192.168.1.20:8420/api/events', 'hearth_k')).toBe('ws://192.168.1.20:8420/api/events?token=hearth_k');
    expect(withTokenParam('wss://box/p/api/events?x=1', 'a+b/c')).toBe('wss://box/p/api/events?x=1&token=a%2Bb%2Fc');
    expect(withTokenParam('ws://h/api/events', null)).toBe('ws://h/api/events');
  });
});

describe("the page's key", () => {
  afterEach(() => {
    setToken(null);
    vi.unstubAllGlobals();
  });

  function fakePage(href: string): TokenPage & { replaced: string[] } {
    const replaced: string[] = [];
    return {
      replaced,
      location: { href, search: new URL(href).search },
      history: { state: { s: 1 }, replaceState: (_d, _u, url) => void replaced.push(String(url)) },
    };
  }

  it('adopts ?token= from the URL, stores it and cleans the address bar', () => {
    const storage = memoryStorage();
    vi.stubGlobal('localStorage', storage);
    const page = fakePage('http://192.168.1.20:8420/?token=hearth_abc#/settings');
    expect(adoptTokenFromPage(page)).toBe('hearth_abc');
    expect(page.replaced).toEqual(['http://192.168.1.20:8420/#/settings']);
    expect(storage.data.get(TOKEN_STORAGE_KEY)).toBe('hearth_abc');
    expect(currentToken()).toBe('hearth_abc');
  });

  it('leaves a URL without a token alone and keeps the stored key', () => {
    vi.stubGlobal('localStorage', memoryStorage());
    setToken('hearth_old');
    const page = fakePage('http://h:1/#/');
    expect(adoptTokenFromPage(page)).toBeNull();
    expect(page.replaced).toEqual([]);
    expect(currentToken()).toBe('hearth_old');
  });

  it('keeps a key in memory when storage refuses it', () => {
    vi.stubGlobal('localStorage', broken);
    setToken('hearth_mem');
    expect(currentToken()).toBe('hearth_mem');
  });
});
