/**
 * What a tool call card says, as pure functions: the arguments as pretty-printed JSON, the words
 * for a call's state and consent, and which image and link parts of a result may become an
 * <img> or an <a> (a result is data from another program: anything else is shown as text).
 */
import type { ToolCallState, ToolConsent } from '../api/mcpTypes';

/** The arguments as indented JSON; a string that is not JSON (a model's broken call) as it is. */
export function formatArguments(args: unknown): string {
  if (typeof args === 'string') {
    try {
      return JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      return args;
    }
  }
  if (args === undefined) return '{}';
  return JSON.stringify(args, null, 2) ?? String(args);
}

export const STATE_LABEL: Record<ToolCallState, string> = {
  pending: 'Waits for you',
  running: 'Running…',
  done: 'Done',
  error: 'Failed',
  denied: 'Denied',
  cancelled: 'Cancelled',
  skipped: 'Skipped',
};

export function stateLabel(state: string): string {
  return STATE_LABEL[state as ToolCallState] ?? state;
}

export const CONSENT_LABEL: Record<ToolConsent, string> = {
  once: 'allowed once',
  chat: 'allowed for this chat',
  always: 'always allowed',
};

/** A data URL for an image part, or null when its type is not an image type or its data not base64. */
export function imageSrc(mime: unknown, data: unknown): string | null {
  if (typeof mime !== 'string' || typeof data !== 'string') return null;
  if (!/^image\/[a-z0-9.+-]+$/i.test(mime)) return null;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(data.replace(/\s+/g, ''))) return null;
  return `data:${mime};base64,${data.replace(/\s+/g, '')}`;
}

/** An address a link part may open: http(s) only; other schemes (file:, a server's own) are shown as text. */
export function linkHref(uri: unknown): string | null {
  if (typeof uri !== 'string') return null;
  try {
    const url = new URL(uri);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch {
    return null;
  }
}
