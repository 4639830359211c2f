/**
 * Wire types of MCP tools (docs/API.md, "Tools (MCP)"): the servers of `/api/mcp/*`, and the
 * tool calls an assistant message carries, with the tolerant reader of one call from the stream.
 * Field names exactly as on the wire (crates/tools: McpServerSpec, McpServerView, McpToolOutcome).
 */

/** How to reach a server: a command run on this machine, or a URL (streamable HTTP). */
export type McpTransport =
  | { type: 'stdio'; command: string; args: string[]; env: Record<string, string>; cwd?: string | null }
  | { type: 'http'; url: string; headers: Record<string, string> };

export interface McpServerSpec {
  name: string;
  transport: McpTransport;
  enabled: boolean;
  call_timeout_ms: number;
  /** The server's own names of the tools switched off (left out by the node when empty). */
  disabled_tools?: string[];
}

export type McpServerStatus =
  | { state: 'stopped' }
  | { state: 'starting' }
  | { state: 'running'; tools: number }
  | { state: 'failed'; error: string; at_unix_ms: number };

export interface McpServer {
  spec: McpServerSpec;
  status: McpServerStatus;
}

/** One tool of a server, from `GET /api/mcp/servers/{name}/tools`. */
export interface McpTool {
  server: string;
  name: string;
  /** `server__tool`: what the model calls it, and what "always allow" names. */
  offered_name: string;
  title: string | null;
  description: string;
  input_schema: unknown;
  enabled: boolean;
}

export interface McpImportResult {
  added: string[];
  skipped: { name: string; reason: string }[];
}

export type McpImportRequest = { json: string } | { path: string };

export type ToolCallState = 'pending' | 'running' | 'done' | 'error' | 'denied' | 'cancelled' | 'skipped';
export type ToolConsent = 'once' | 'chat' | 'always';
/** What the user answers a call that waits for consent. */
export type ToolDecision = ToolConsent | 'deny';

/** One part of a tool's result. A result is data: text is shown as text, never as HTML. */
export type ToolContent =
  | { type: 'text'; text: string }
  | { type: 'image'; mime_type: string; data: string }
  | { type: 'link'; uri: string; name: string; mime_type?: string };

export interface ToolOutcome {
  parts: ToolContent[];
  is_error: boolean;
  /** Bytes left out by the node's 1 MiB cap (0 when nothing was cut). */
  cut_bytes: number;
}

/** A call an answer made, as stored with its assistant message. */
export interface ToolCall {
  id: string;
  /** `server__tool`. */
  name: string;
  server: string;
  tool: string;
  arguments: unknown;
  state: ToolCallState;
  consent: ToolConsent | null;
  /** The user's reason for a denial. */
  reason: string | null;
  outcome: ToolOutcome | null;
  error: string | null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/**
 * A call from the stream, with missing fields filled in; `null` without an id or a state.
 * `server` and `tool` fall back to the halves of `name` (`server__tool`).
 */
export function parseToolCall(v: unknown): ToolCall | null {
  if (!isObject(v) || typeof v.id !== 'string' || typeof v.state !== 'string') return null;
  const name = str(v.name) ?? '';
  const cut = name.indexOf('__');
  return {
    id: v.id,
    name,
    server: str(v.server) ?? (cut > 0 ? name.slice(0, cut) : ''),
    tool: str(v.tool) ?? (cut > 0 ? name.slice(cut + 2) : name),
    arguments: v.arguments ?? {},
    state: v.state as ToolCallState,
    consent: (str(v.consent) as ToolConsent | null) ?? null,
    reason: str(v.reason),
    outcome: isObject(v.outcome) ? parseOutcome(v.outcome) : null,
    error: str(v.error),
  };
}

function parseOutcome(v: Record<string, unknown>): ToolOutcome {
  return {
    parts: Array.isArray(v.parts) ? (v.parts.filter(isObject) as unknown as ToolContent[]) : [],
    is_error: v.is_error === true,
    cut_bytes: typeof v.cut_bytes === 'number' ? v.cut_bytes : 0,
  };
}
