/**
 * Pure helpers of Settings → Tools: a server's status and transport in words, a spec with one
 * tool switched on or off (what the tool switch PUTs), and the body of an import (pasted JSON
 * or a file path, one of the two).
 */
import type { McpImportRequest, McpServerSpec, McpServerStatus } from '../api/mcpTypes';

export function statusText(status: McpServerStatus): string {
  switch (status.state) {
    case 'stopped':
      return 'Stopped';
    case 'starting':
      return 'Starting…';
    case 'running':
      return `Running, ${status.tools} ${status.tools === 1 ? 'tool' : 'tools'}`;
    case 'failed':
      return `Failed: ${status.error}`;
    default:
      return String((status as { state: unknown }).state);
  }
}

/** An argument as a shell would need it to read it back as one word. */
function quoteArg(arg: string): string {
  return arg === '' || /[\s"'\\$`]/.test(arg) ? `'${arg.replace(/'/g, `'\\''`)}'` : arg;
}

/** The command line or URL of a server, for its row (never env or header values). */
export function transportText(spec: McpServerSpec): string {
  const t = spec.transport;
  if (t.type === 'http') return t.url;
  return [t.command, ...t.args].map(quoteArg).join(' ');
}

/** The spec with tool `tool` switched on or off (`disabled_tools` sorted, each name once). */
export function withToolEnabled(spec: McpServerSpec, tool: string, enabled: boolean): McpServerSpec {
  const off = new Set(spec.disabled_tools ?? []);
  if (enabled) off.delete(tool);
  else off.add(tool);
  return { ...spec, disabled_tools: [...off].sort() };
}

export type ImportBody = { ok: true; body: McpImportRequest } | { ok: false; error: string };

/** What the import box sends: the pasted JSON, or else the file path; never both. */
export function importBody(json: string, path: string): ImportBody {
  const [j, p] = [json.trim(), path.trim()];
  if (j && p) return { ok: false, error: 'Paste the JSON or give a file path, not both.' };
  if (j) return { ok: true, body: { json: j } };
  if (p) return { ok: true, body: { path: p } };
  return { ok: false, error: 'Paste the "mcpServers" JSON, or give the path of the file that holds it.' };
}
