import { describe, expect, it } from 'vitest';
import { resolveApiBase, TAURI_DEFAULT_API, toWebSocketUrl, type PageLocation } from './base';

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
