import { describe, expect, it } from 'vitest';
import type { ApiKey } from '../api/types';
import { checkKeyName, KEY_NAME_MAX, markRevoked, orderKeys } from './keys';

const key = (id: string, created_at: number, revoked = false): ApiKey => ({
  id,
  name: id,
  prefix: `hearth_${id}`,
  created_at,
  last_used_at: null,
  revoked,
});

describe('checkKeyName', () => {
  it('trims, joins lines and bounds the length as the node does', () => {
    expect(checkKeyName('  laptop ')).toEqual({ ok: true, name: 'laptop' });
    expect(checkKeyName('my\nlaptop')).toEqual({ ok: true, name: 'my laptop' });
    expect(checkKeyName('   ').ok).toBe(false);
    expect(checkKeyName('é'.repeat(KEY_NAME_MAX)).ok).toBe(true);
    expect(checkKeyName('x'.repeat(KEY_NAME_MAX + 1)).ok).toBe(false);
  });
});

describe('orderKeys / markRevoked', () => {
  it('shows active keys first, newest first, without touching the input', () => {
    const keys = [key('a', 1), key('b', 2, true), key('c', 3), key('d', 4, true)];
    expect(orderKeys(keys).map((k) => k.id)).toEqual(['c', 'a', 'd', 'b']);
    expect(keys.map((k) => k.id)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('marks one key revoked', () => {
    const keys = [key('a', 1), key('b', 2)];
    const after = markRevoked(keys, 'b');
    expect(after.map((k) => k.revoked)).toEqual([false, true]);
    expect(after[0]).toBe(keys[0]);
    expect(keys[1].revoked).toBe(false);
  });
});
