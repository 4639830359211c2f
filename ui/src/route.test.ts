import { describe, expect, it } from 'vitest';
import { formatRoute, parseHash, startRoute, type Route } from './route';

describe('hash routes', () => {
  it('parses every page', () => {
    expect(parseHash('')).toEqual({ page: 'chat', conversationId: null });
    expect(parseHash('#/')).toEqual({ page: 'chat', conversationId: null });
    expect(parseHash('#/c/c_123')).toEqual({ page: 'chat', conversationId: 'c_123' });
    expect(parseHash('#/models')).toEqual({ page: 'models' });
    expect(parseHash('#/status/')).toEqual({ page: 'status' });
    expect(parseHash('#/settings')).toEqual({ page: 'settings' });
    expect(parseHash('#/cluster')).toEqual({ page: 'cluster' });
    expect(parseHash('#/c/')).toEqual({ page: 'chat', conversationId: null });
    expect(parseHash('#/c/%E0%A4%A')).toEqual({ page: 'chat', conversationId: null });
    expect(parseHash('#/nowhere')).toEqual({ page: 'chat', conversationId: null });
  });

  it('round-trips', () => {
    const routes: Route[] = [
      { page: 'chat', conversationId: null },
      { page: 'chat', conversationId: 'c_a/b c' },
      { page: 'models' },
      { page: 'status' },
      { page: 'cluster' },
      { page: 'settings' },
    ];
    for (const r of routes) expect(parseHash(formatRoute(r))).toEqual(r);
    expect(formatRoute({ page: 'chat', conversationId: 'c_1' })).toBe('#/c/c_1');
  });
});

describe('the first page', () => {
  it('opens the Models page when no model is loaded and nothing else was asked for', () => {
    expect(startRoute({ page: 'chat', conversationId: null }, 'empty')).toEqual({ page: 'models' });
    expect(startRoute({ page: 'chat', conversationId: null }, 'ready')).toBeNull();
    expect(startRoute({ page: 'chat', conversationId: null }, 'loading')).toBeNull();
    expect(startRoute({ page: 'chat', conversationId: 'c_1' }, 'empty')).toBeNull();
    expect(startRoute({ page: 'settings' }, 'empty')).toBeNull();
  });
});
