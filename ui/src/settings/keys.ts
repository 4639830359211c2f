/**
 * Pure helpers of the Settings page's API keys: the name check (as the node's: trimmed, not
 * empty, at most 200 characters), the order rows are shown in, and a revoke applied to the list
 * before the node's next answer.
 */
import type { ApiKey } from '../api/types';

export const KEY_NAME_MAX = 200;

export type NameCheck = { ok: true; name: string } | { ok: false; error: string };

export function checkKeyName(raw: string): NameCheck {
  const name = raw.trim().replace(/[\r\n]+/g, ' ');
  if (!name) return { ok: false, error: 'Give the key a name, e.g. the machine that will use it.' };
  if ([...name].length > KEY_NAME_MAX) return { ok: false, error: `A name may be at most ${KEY_NAME_MAX} characters.` };
  return { ok: true, name };
}

/** Active keys first, newest first within each group (the node lists oldest first). */
export function orderKeys(keys: readonly ApiKey[]): ApiKey[] {
  return [...keys].sort((a, b) => Number(a.revoked) - Number(b.revoked) || b.created_at - a.created_at || (a.id < b.id ? 1 : -1));
}

/** The list with key `id` marked revoked. */
export function markRevoked(keys: readonly ApiKey[], id: string): ApiKey[] {
  return keys.map((k) => (k.id === id ? { ...k, revoked: true } : k));
}
