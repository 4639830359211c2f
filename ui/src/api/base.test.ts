import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  apiBase,
  eventsUrl,
  initApiBase,
  resetApiBase,
  resolveApiBase,
  resolveApiBaseAsync,
  TAURI_DEFAULT_API,
  toWebSocketUrl,
  type PageLocation,
  type PageWindow,
} from './base';
import { setToken } from './token';

const page = (href: string): PageLocation => {
  const u = new URL(href);
  return { protocol: u.protocol, hostname: u.hostname, origin: u.origin, search: u.search };
};

describe('resolveApiBase', () => {
  it('uses the page origin when served by the node', () => {
    expect(resolveApiBase(page('http://127.0.0.1:43210/#/c/c_1'))).toBe('http://127.0.0.1:43210');
  });

  it("uses the node's default address inside Tauri", () => {
    expect(resolveApiBase({ protocol: 'tauri:', hostname: 'localhost', origin: 'tauri://localhost', search: '' })).toBe(
      TAURI_DEFAULT_API,
    );
    expect(resolveApiBase(page('http://tauri.localhost/'))).toBe(TAURI_DEFAULT_API);
  });

  it('lets ?api= override both, but only with an http(s) URL', () => {
    expect(resolveApiBase({ protocol: 'tauri:', hostname: 'localhost', origin: 'tauri://localhost', search: '?api=http://127.0.0.1:9000/' })).toBe(
      'http://127.0.0.1:9000',
    );
    expect(resolveApiBase(page('http://127.0.0.1:1/?api=javascript:alert(1)'))).toBe('http://127.0.0.1:1');
  });
});

describe('toWebSocketUrl', () => {
  it('maps http to ws and https to wss, keeping host and prefix', () => {
    expect(toWebSocketUrl('http://127.0.0.1:8420', '/api/events')).toBe('ws://127.0.0.1:8420/api/events');
    expect(toWebSocketUrl('https://box.lan/hearth', '/api/events')).toBe('wss://box.lan/hearth/api/events');
  });
});

const TAURI_PAGE: PageLocation = { protocol: 'tauri:', hostname: 'localhost', origin: 'tauri://localhost', search: '' };

/** A Tauri window whose shell answers `node_url` with `answer` (or fails, or never answers). */
function tauriWindow(answer: () => Promise<unknown>, location: PageLocation = TAURI_PAGE) {
  const invoke = vi.fn((cmd: string) => (cmd === 'node_url' ? answer() : Promise.reject(new Error(`unknown command ${cmd}`))));
  const win: PageWindow = { location, __TAURI__: { core: { invoke } } };
  return { win, invoke };
}

describe('resolveApiBaseAsync (the desktop shell names the node)', () => {
  it("asks the shell's node_url inside Tauri", async () => {
    const { win, invoke } = tauriWindow(async () => 'http://127.0.0.1:51234/');
    await expect(resolveApiBaseAsync(win)).resolves.toBe('http://127.0.0.1:51234');
    expect(invoke).toHaveBeenCalledWith('node_url');
    const windows = tauriWindow(async () => 'http://127.0.0.1:9999', {
      protocol: 'http:',
      hostname: 'tauri.localhost',
      origin: 'http://tauri.localhost',
      search: '',
    });
    await expect(resolveApiBaseAsync(windows.win)).resolves.toBe('http://127.0.0.1:9999');
  });

  it('falls back to the default address when the shell fails, answers junk or is absent', async () => {
    await expect(resolveApiBaseAsync(tauriWindow(() => Promise.reject(new Error('no such command'))).win)).resolves.toBe(
      TAURI_DEFAULT_API,
    );
    await expect(resolveApiBaseAsync(tauriWindow(async () => 42).win)).resolves.toBe(TAURI_DEFAULT_API);
    await expect(resolveApiBaseAsync(tauriWindow(async () => 'javascript:alert(1)').win)).resolves.toBe(TAURI_DEFAULT_API);
    await expect(resolveApiBaseAsync({ location: TAURI_PAGE })).resolves.toBe(TAURI_DEFAULT_API);
    await expect(resolveApiBaseAsync({ location: TAURI_PAGE, __TAURI__: {} })).resolves.toBe(TAURI_DEFAULT_API);
    const throwing: PageWindow = {
      location: TAURI_PAGE,
      __TAURI__: {
        core: {
          invoke: () => {
            throw new Error('sync failure');
          },
        },
      },
    };
    await expect(resolveApiBaseAsync(throwing)).resolves.toBe(TAURI_DEFAULT_API);
  });

  it('does not wait forever for a shell that never answers', async () => {
    vi.useFakeTimers();
    try {
      const pending = resolveApiBaseAsync(tauriWindow(() => new Promise(() => undefined)).win, 3000);
      await vi.advanceTimersByTimeAsync(3000);
      await expect(pending).resolves.toBe(TAURI_DEFAULT_API);
    } finally {
      vi.useRealTimers();
    }
  });

  it('lets ?api= override the shell, and never asks it outside Tauri', async () => {
    const over = tauriWindow(async () => 'http://127.0.0.1:51234', { ...TAURI_PAGE, search: '?api=http://10.0.0.2:8420' });
    await expect(resolveApiBaseAsync(over.win)).resolves.toBe('http://10.0.0.2:8420');
    expect(over.invoke).not.toHaveBeenCalled();
    const web = tauriWindow(async () => 'http://127.0.0.1:51234', page('http://192.168.1.20:8420/#/'));
    await expect(resolveApiBaseAsync(web.win)).resolves.toBe('http://192.168.1.20:8420');
    expect(web.invoke).not.toHaveBeenCalled();
  });
});

describe('initApiBase / apiBase / eventsUrl', () => {
  afterEach(() => {
    resetApiBase();
    setToken(null);
    vi.unstubAllGlobals();
  });

  it('asks once at startup; apiBase() is synchronous afterwards', async () => {
    const { win, invoke } = tauriWindow(async () => 'http://127.0.0.1:51234');
    vi.stubGlobal('window', win);
    await expect(initApiBase()).resolves.toBe('http://127.0.0.1:51234');
    await initApiBase();
    expect(invoke).toHaveBeenCalledTimes(1);
    expect(apiBase()).toBe('http://127.0.0.1:51234');
    expect(eventsUrl()).toBe('ws://127.0.0.1:51234/api/events');
  });

  it('puts the key on the events URL, read at each call', () => {
    vi.stubGlobal('window', { location: page('http://192.168.1.20:8420/') });
    expect(eventsUrl()).toBe('ws://192.168.1.20:8420/api/events');
    setToken('hearth_k1');
    expect(eventsUrl()).toBe('ws://192.168.1.20:8420/api/events?token=hearth_k1');
  });
});
