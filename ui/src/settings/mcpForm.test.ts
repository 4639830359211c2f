import { describe, expect, it } from 'vitest';
import type { McpServerSpec } from '../api/mcpTypes';
import { emptyServerForm, parseServerForm, toServerForm, type McpServerForm } from './mcpForm';
import { importBody, statusText, transportText, withToolEnabled } from './mcpView';

const files: McpServerSpec = {
  name: 'files',
  transport: {
    type: 'stdio',
    command: 'npx',
    args: ['-y', '@modelcontextprotocol/server-filesystem', '/home/me/My Notes'],
    env: { API_KEY: 's3cret' },
    cwd: null,
  },
  enabled: true,
  call_timeout_ms: 60000,
  disabled_tools: ['write_file'],
};

const remote: McpServerSpec = {
  name: 'search',
  transport: { type: 'http', url: 'https://example.com/mcp', headers: { Authorization: 'Bearer t0k' } },
  enabled: false,
  call_timeout_ms: 1500,
  disabled_tools: [],
};

const stdioForm = (patch: Partial<McpServerForm>): McpServerForm => ({
  ...emptyServerForm('stdio'),
  name: 'fs',
  command: 'node',
  ...patch,
});

describe('the server form', () => {
  it('round-trips both kinds of spec, secrets and switched-off tools kept', () => {
    expect(parseServerForm(toServerForm(files))).toEqual({ ok: true, spec: files });
    expect(parseServerForm(toServerForm(remote))).toEqual({ ok: true, spec: remote });
  });

  it('reads a spec without disabled_tools or cwd, as the node leaves them out', () => {
    const bare = { ...files, transport: { type: 'stdio' as const, command: 'x', args: [], env: {} } };
    delete (bare as Partial<McpServerSpec>).disabled_tools;
    const form = toServerForm(bare);
    expect([form.cwd, form.disabled_tools]).toEqual(['', []]);
  });

  it('takes arguments one per line, drops blank lines and blank env rows', () => {
    const parsed = parseServerForm(
      stdioForm({ args: ' -y\n\n@scope/pkg \r\n/a b\n', env: [{ key: '', value: '' }, { key: ' TOKEN ', value: ' v ' }], cwd: ' /tmp ' }),
    );
    expect(parsed).toEqual({
      ok: true,
      spec: {
        name: 'fs',
        enabled: true,
        call_timeout_ms: 60000,
        disabled_tools: [],
        transport: { type: 'stdio', command: 'node', args: ['-y', '@scope/pkg', '/a b'], env: { TOKEN: ' v ' }, cwd: '/tmp' },
      },
    });
  });

  it('refuses what the node would refuse, saying what is wrong', () => {
    const cases: [Partial<McpServerForm>, RegExp][] = [
      [{ name: '' }, /name/],
      [{ name: 'a__b' }, /without "__"/],
      [{ name: 'a b' }, /letters, digits/],
      [{ name: 'x'.repeat(33) }, /1 to 32/],
      [{ command: '  ' }, /command/],
      [{ timeout_s: '0' }, /timeout/],
      [{ timeout_s: 'soon' }, /timeout/],
      [{ env: [{ key: 'A=B', value: '1' }] }, /"="/],
      [{ env: [{ key: '', value: 'orphan' }] }, /without a name/],
      [{ env: [{ key: 'A', value: '1' }, { key: 'A', value: '2' }] }, /twice/],
      [{ kind: 'http', url: 'ftp://example.com' }, /http:\/\/ or https:\/\//],
      [{ kind: 'http', url: 'https://' }, /http:\/\/ or https:\/\//],
      [{ kind: 'http', url: 'https://x.dev/mcp', headers: [{ key: 'Bad Header', value: 'v' }] }, /not a valid header name/],
      [{ kind: 'http', url: 'https://x.dev/mcp', headers: [{ key: 'X-A', value: 'a\r\nb' }] }, /line breaks/],
    ];
    for (const [patch, message] of cases) {
      const parsed = parseServerForm(stdioForm(patch));
      expect(parsed.ok, JSON.stringify(patch)).toBe(false);
      if (!parsed.ok) expect(parsed.error).toMatch(message);
    }
    expect(parseServerForm(stdioForm({ name: 'ok-1_a' })).ok).toBe(true);
  });
});

describe('the server list in words', () => {
  it('says each status', () => {
    expect(statusText({ state: 'stopped' })).toBe('Stopped');
    expect(statusText({ state: 'starting' })).toBe('Starting…');
    expect(statusText({ state: 'running', tools: 1 })).toBe('Running, 1 tool');
    expect(statusText({ state: 'running', tools: 11 })).toBe('Running, 11 tools');
    expect(statusText({ state: 'failed', error: 'npx: not found', at_unix_ms: 1 })).toBe('Failed: npx: not found');
  });

  it('shows the command line quoted, or the URL, never env or header values', () => {
    expect(transportText(files)).toBe("npx -y @modelcontextprotocol/server-filesystem '/home/me/My Notes'");
    expect(transportText(files)).not.toContain('s3cret');
    expect(transportText(remote)).toBe('https://example.com/mcp');
  });

  it('switches one tool in disabled_tools', () => {
    expect(withToolEnabled(files, 'write_file', true).disabled_tools).toEqual([]);
    expect(withToolEnabled(files, 'read_file', false).disabled_tools).toEqual(['read_file', 'write_file']);
    expect(withToolEnabled(files, 'write_file', false).disabled_tools).toEqual(['write_file']);
    expect(withToolEnabled(files, 'x', false).transport).toBe(files.transport);
  });
});

describe('the import body', () => {
  it('sends the pasted JSON or the path, one of them', () => {
    expect(importBody(' {"mcpServers":{}} ', '')).toEqual({ ok: true, body: { json: '{"mcpServers":{}}' } });
    expect(importBody('', ' /home/me/mcp.json ')).toEqual({ ok: true, body: { path: '/home/me/mcp.json' } });
    expect(importBody('', '  ').ok).toBe(false);
    expect(importBody('{}', '/x').ok).toBe(false);
  });
});
