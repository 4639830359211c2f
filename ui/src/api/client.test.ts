import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { authState, resetAuth } from './auth';
import { resetApiBase } from './base';
import { api, ApiError, apiFetch } from './client';
import { setToken } from './token';

interface Seen {
  url: string;
  headers: Record<string, string>;
}

function fakeFetch(status: number, body: unknown = {}): Seen[] {
  const seen: Seen[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init?: RequestInit) => {
      seen.push({ url, headers: { ...(init?.headers as Record<string, string>) } });
      return status === 204
        ? new Response(null, { status })
        : new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
    }),
  );
  return seen;
}

describe('apiFetch and the API key', () => {
  beforeEach(() => {
    vi.stubGlobal('window', { location: { protocol: 'http:', hostname: '192.168.1.20', origin: 'http://192.168.1.20:8420', search: '' } });
  });
  afterEach(() => {
    setToken(null);
    resetAuth();
    resetApiBase();
    vi.unstubAllGlobals();
  });

  it('sends no Authorization header without a key', async () => {
    const seen = fakeFetch(200, { conversations: [] });
    await api.listConversations();
    expect(seen[0].url).toBe('http://192.168.1.20:8420/api/conversations');
    expect(seen[0].headers.authorization).toBeUndefined();
    expect(seen[0].headers.accept).toBe('application/json');
  });

  it('asks for the coding agents of the focus model, or of a model named', async () => {
    const seen = fakeFetch(200, { agents: [] });
    await api.agents();
    await api.agents('owner/m 1');
    expect(seen.map((s) => s.url)).toEqual([
      'http://192.168.1.20:8420/api/agents',
      'http://192.168.1.20:8420/api/agents?model=owner%2Fm%201',
    ]);
  });

  it('sends the key as a Bearer token on every call, keeping the other headers', async () => {
    setToken('hearth_k1');
    const seen = fakeFetch(201, { key: {}, secret: 'hearth_x' });
    await api.createKey('laptop');
    await apiFetch('/api/conversations/c_1/chat', { method: 'POST', headers: { accept: 'text/event-stream' } });
    expect(seen.map((s) => s.headers.authorization)).toEqual(['Bearer hearth_k1', 'Bearer hearth_k1']);
    expect(seen[0].headers['content-type']).toBe('application/json');
    expect(seen[1].headers.accept).toBe('text/event-stream');
  });

  it('reports a 401 (saying whether a key was sent) and still throws the ApiError', async () => {
    fakeFetch(401, { error: { message: 'send an API key', code: 'unauthorized' } });
    await expect(api.status()).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
    expect(authState()).toEqual({ required: true, keyRefused: false });
    resetAuth();
    setToken('hearth_revoked');
    await expect(api.models()).rejects.toBeInstanceOf(ApiError);
    expect(authState()).toEqual({ required: true, keyRefused: true });
  });

  it('does not ask for a key on a 403 (keys are managed on the node machine only)', async () => {
    fakeFetch(403, { error: { message: 'only from this machine', code: 'forbidden' } });
    await expect(api.listKeys()).rejects.toMatchObject({ status: 403 });
    expect(authState().required).toBe(false);
  });

  it('revokes by id with DELETE and an encoded path', async () => {
    const seen = fakeFetch(204);
    await expect(api.revokeKey('k_a/b')).resolves.toBeUndefined();
    expect(seen[0].url).toBe('http://192.168.1.20:8420/api/keys/k_a%2Fb');
  });
  it('reaches the MCP routes with their exact paths, unwrapping the lists', async () => {
    const seen: { url: string; method: string; body: unknown }[] = [];
    const answers: unknown[] = [{ servers: [] }, { tools: [{ name: 't' }] }, { lines: ['a'] }, { always: ['fs__read'] }, {}];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string, init?: RequestInit) => {
        seen.push({ url, method: init?.method ?? 'GET', body: init?.body ? JSON.parse(String(init.body)) : undefined });
        return new Response(JSON.stringify(answers.shift() ?? {}), { status: 200 });
      }),
    );
    expect(await api.mcpServers()).toEqual([]);
    expect(await api.mcpTools('my fs')).toEqual([{ name: 't' }]);
    expect(await api.mcpLog('fs')).toEqual(['a']);
    expect(await api.mcpAllowed()).toEqual(['fs__read']);
    await api.forgetMcpAllowed('fs__read');
    const spec = { name: 'fs', transport: { type: 'http' as const, url: 'https://x/mcp', headers: {} }, enabled: true, call_timeout_ms: 1 };
    await api.putMcpServer('fs', spec);
    await api.importMcp({ path: '/a/mcp.json' });
    const base = 'http://192.168.1.20:8420';
    expect(seen.map((s) => `${s.method} ${s.url.slice(base.length)}`)).toEqual([
      'GET /api/mcp/servers',
      'GET /api/mcp/servers/my%20fs/tools',
      'GET /api/mcp/servers/fs/log',
      'GET /api/mcp/allowed',
      'DELETE /api/mcp/allowed/fs__read',
      'PUT /api/mcp/servers/fs',
      'POST /api/mcp/import',
    ]);
    expect(seen[5].body).toEqual(spec);
    expect(seen[6].body).toEqual({ path: '/a/mcp.json' });
  });
});
