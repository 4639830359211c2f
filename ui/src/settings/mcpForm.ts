/**
 * The add/edit form of an MCP server: what the inputs show for a stored spec, and the checked
 * spec a filled-in form stands for, by the node's rules (crates/tools/src/spec.rs: the name,
 * a command or an http(s) URL, valid header names and values, a timeout of at least 1 ms).
 */
import type { McpServerSpec } from '../api/mcpTypes';

export type ServerKind = 'stdio' | 'http';

/** One env entry or header: its value is a secret as far as the page is concerned. */
export interface Entry {
  key: string;
  value: string;
}

export interface McpServerForm {
  name: string;
  kind: ServerKind;
  command: string;
  /** One argument per line. */
  args: string;
  env: Entry[];
  /** Empty: the node's own working folder. */
  cwd: string;
  url: string;
  headers: Entry[];
  enabled: boolean;
  /** The call timeout, in seconds. */
  timeout_s: string;
  /** Kept as stored: switched per tool in the server's tool list, not here. */
  disabled_tools: string[];
}

export const SERVER_NAME_MAX = 32;
export const DEFAULT_TIMEOUT_S = 60;

export function emptyServerForm(kind: ServerKind = 'stdio'): McpServerForm {
  return {
    name: '',
    kind,
    command: '',
    args: '',
    env: [],
    cwd: '',
    url: '',
    headers: [],
    enabled: true,
    timeout_s: String(DEFAULT_TIMEOUT_S),
    disabled_tools: [],
  };
}

const entries = (map: Record<string, string> | undefined): Entry[] =>
  Object.entries(map ?? {}).map(([key, value]) => ({ key, value }));

export function toServerForm(spec: McpServerSpec): McpServerForm {
  const form: McpServerForm = {
    ...emptyServerForm(spec.transport.type),
    name: spec.name,
    enabled: spec.enabled,
    timeout_s: String(spec.call_timeout_ms / 1000),
    disabled_tools: [...(spec.disabled_tools ?? [])],
  };
  const t = spec.transport;
  if (t.type === 'stdio') {
    return { ...form, command: t.command, args: t.args.join('\n'), env: entries(t.env), cwd: t.cwd ?? '' };
  }
  return { ...form, url: t.url, headers: entries(t.headers) };
}

export type ParsedServer = { ok: true; spec: McpServerSpec } | { ok: false; error: string };

/** The node's name rule: 1-32 letters, digits, `-` or `_`, without `__` (a tool is `server__tool`). */
export function checkServerName(name: string): string | null {
  if (!name) return 'Give the server a name.';
  if (name.length > SERVER_NAME_MAX || !/^[A-Za-z0-9_-]+$/.test(name) || name.includes('__')) {
    return `A name is 1 to ${SERVER_NAME_MAX} letters, digits, "-" or "_", without "__".`;
  }
  return null;
}

/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What an HTTP header value may not hold: control characters other than tab. */
const HEADER_VALUE_BAD = /[\x00-\x08\x0a-\x1f\x7f]/;

export function parseServerForm(form: McpServerForm): ParsedServer {
  const name = form.name.trim();
  const nameError = checkServerName(name);
  if (nameError) return { ok: false, error: nameError };

  const seconds = Number(form.timeout_s);
  if (form.timeout_s.trim() === '' || !Number.isFinite(seconds) || seconds < 0.001) {
    return { ok: false, error: 'The call timeout must be a number of seconds greater than 0.' };
  }
  const base = {
    name,
    enabled: form.enabled,
    call_timeout_ms: Math.round(seconds * 1000),
    disabled_tools: form.disabled_tools,
  };

  if (form.kind === 'stdio') {
    const command = form.command.trim();
    if (!command) return { ok: false, error: 'Name the command that starts the server, e.g. npx.' };
    const env = toMap(form.env, 'Environment variable', (key) =>
      key.includes('=') || key.includes('\0') ? `Environment variable "${key}": a name cannot hold "=".` : null,
    );
    if (!env.ok) return env;
    const args = form.args
      .split(/\r?\n/)
      .map((a) => a.trim())
      .filter((a) => a !== '');
    const cwd = form.cwd.trim();
    return {
      ok: true,
      spec: { ...base, transport: { type: 'stdio', command, args, env: env.map, cwd: cwd === '' ? null : cwd } },
    };
  }

  const url = form.url.trim();
  if (!isHttpUrl(url)) return { ok: false, error: 'The URL must start with http:// or https://, e.g. https://example.com/mcp.' };
  const headers = toMap(form.headers, 'Header', (key, value) => {
    if (!HEADER_NAME.test(key)) return `Header "${key}" is not a valid header name.`;
    if (HEADER_VALUE_BAD.test(value)) return `Header "${key}": its value cannot hold line breaks or control characters.`;
    return null;
  });
  if (!headers.ok) return headers;
  return { ok: true, spec: { ...base, transport: { type: 'http', url, headers: headers.map } } };
}

type MapResult = { ok: true; map: Record<string, string> } | { ok: false; error: string };

/** Entries to a map: blank rows dropped, names trimmed, each name once. */
function toMap(rows: Entry[], what: string, check: (key: string, value: string) => string | null): MapResult {
  const map: Record<string, string> = {};
  for (const row of rows) {
    const key = row.key.trim();
    if (!key && !row.value) continue;
    if (!key) return { ok: false, error: `${what} without a name: name it or remove the row.` };
    if (Object.hasOwn(map, key)) return { ok: false, error: `${what} "${key}" is given twice.` };
    const error = check(key, row.value);
    if (error) return { ok: false, error };
    map[key] = row.value;
  }
  return { ok: true, map };
}

function isHttpUrl(s: string): boolean {
  if (!/^https?:\/\//i.test(s)) return false;
  try {
    return Boolean(new URL(s).host);
  } catch {
    return false;
  }
}
