/**
 * Typed calls to the node's REST routes (docs/API.md). Owns request encoding, the API key on
 * every request (`apiFetch`: a 401 is reported to `auth.ts`) and the mapping of the
 * `{"error": {"message", "code"}}` body to `ApiError`; nothing here keeps state.
 */
import { reportUnauthorized } from './auth';
import { apiUrl } from './base';
import { authHeaders, currentToken } from './token';
import type {
  AgentsResponse,
  ClusterPatch,
  ClusterView,
  Conversation,
  ConversationDetail,
  ConversationPatch,
  CreatedKey,
  DocumentInfo,
  Download,
  ImportableModel,
  KeyScope,
  KeysResponse,
  ModelsResponse,
  NodeSettings,
  SearchAnswer,
  SplitPlacement,
  SplitsResponse,
  StatusResponse,
} from './types';
import type { McpImportRequest, McpImportResult, McpServer, McpServerSpec, McpTool } from './mcpTypes';

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
  ) {
    super(message);
    this.name = 'ApiError';
  }

  /** Reads the error body of a failed response (or falls back to the status line). */
  static async from(res: Response): Promise<ApiError> {
    let message = `${res.status} ${res.statusText}`.trim();
    let code: string | null = null;
    try {
      const body: unknown = await res.json();
      const err = (body as { error?: { message?: unknown; code?: unknown } } | null)?.error;
      if (err && typeof err.message === 'string') message = err.message;
      if (err && typeof err.code === 'string') code = err.code;
    } catch {
      // Not JSON: keep the status line.
    }
    return new ApiError(message, res.status, code);
  }
}

/** A sentence for the user about a failed call. */
export function errorText(e: unknown): string {
  if (e instanceof ApiError) return e.message;
  // fetch rejects with a TypeError when the node cannot be reached at all.
  if (e instanceof TypeError) return 'Cannot reach the node.';
  return e instanceof Error ? e.message : String(e);
}

/**
 * `fetch` of an API path with this page's key (`Authorization: Bearer`). A 401 answer is
 * reported (the app then asks for a key) and returned like any other response.
 */
export async function apiFetch(path: string, init: RequestInit = {}): Promise<Response> {
  const token = currentToken();
  const headers = { ...(init.headers as Record<string, string> | undefined), ...authHeaders(token) };
  const res = await fetch(apiUrl(path), { ...init, headers });
  // A late answer to a request sent with a key since replaced says nothing about the new one.
  if (res.status === 401 && token === currentToken()) reportUnauthorized(token !== null);
  return res;
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, headers: { accept: 'application/json' } };
  if (body !== undefined) {
    init.headers = { ...init.headers, 'content-type': 'application/json' };
    init.body = JSON.stringify(body);
  }
  const res = await apiFetch(path, init);
  if (!res.ok) throw await ApiError.from(res);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

const enc = encodeURIComponent;

export const api = {
  status: () => request<StatusResponse>('GET', '/api/status'),

  listConversations: async (q?: string): Promise<Conversation[]> => {
    const query = q && q.trim() ? `?q=${enc(q.trim())}` : '';
    const res = await request<{ conversations: Conversation[] }>('GET', `/api/conversations${query}`);
    return res.conversations;
  },
  createConversation: (title?: string) =>
    request<Conversation>('POST', '/api/conversations', title ? { title } : {}),
  getConversation: (id: string) => request<ConversationDetail>('GET', `/api/conversations/${enc(id)}`),
  updateConversation: (id: string, patch: ConversationPatch) =>
    request<Conversation>('PATCH', `/api/conversations/${enc(id)}`, patch),
  deleteConversation: (id: string) => request<void>('DELETE', `/api/conversations/${enc(id)}`),
  listDocuments: async (id: string): Promise<DocumentInfo[]> =>
    (await request<{ documents: DocumentInfo[] }>('GET', `/api/conversations/${enc(id)}/documents`)).documents,
  /** Sends the file as it is; the node reads it and answers with the document kept. */
  addDocument: async (id: string, file: Blob, name: string): Promise<{ document: DocumentInfo; added: boolean }> => {
    const res = await apiFetch(`/api/conversations/${enc(id)}/documents?name=${enc(name)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', accept: 'application/json' },
      body: file,
    });
    if (!res.ok) throw await ApiError.from(res);
    return (await res.json()) as { document: DocumentInfo; added: boolean };
  },
  removeDocument: (id: string, documentId: string) =>
    request<void>('DELETE', `/api/conversations/${enc(id)}/documents/${enc(documentId)}`),
  stopMessage: (id: string) => request<unknown>('POST', `/api/messages/${enc(id)}/stop`),

  models: () => request<ModelsResponse>('GET', '/api/models'),
  loadModel: (id: string) => request<{ id: string; state: string }>('POST', '/api/models/load', { id }),
  unloadModel: (id?: string) =>
    request<{ state: string }>('POST', '/api/models/unload', id === undefined ? undefined : { id }),
  /** Models of Ollama and LM Studio, imported without a copy. */
  importable: () => request<{ models: ImportableModel[] }>('GET', '/api/models/importable'),
  importModels: (id?: string) =>
    request<{ imported: string[]; failed: { id: string; error: string }[] }>(
      'POST',
      '/api/models/import',
      id === undefined ? {} : { id },
    ),
  /** The hub's GGUF models matching `q`, each file marked by whether it fits here. */
  searchModels: (q: string) => request<SearchAnswer>('GET', `/api/models/search?q=${enc(q)}`),
  /** Downloads from the hub (OWNER/REPO/FILE.gguf), with their progress. */
  downloads: () => request<{ downloads: Download[] }>('GET', '/api/models/downloads'),
  startDownload: (model: string) => request<Download>('POST', '/api/models/downloads', { model }),
  cancelDownload: (id: string) => request<{ cancelled: string }>('DELETE', `/api/models/downloads/${enc(id)}`),
  /** Models split across this node and peers that share their memory. */
  splits: () => request<SplitsResponse>('GET', '/api/models/split'),
  splitModel: (model: string) => request<SplitPlacement>('POST', '/api/models/split', { model }),
  unsplitModel: (model: string) =>
    request<{ model: string; split: boolean }>('DELETE', `/api/models/split/${enc(model)}`),
  /** Refused (409) while the model is loaded. */
  deleteModel: (id: string) => request<{ removed: string[] }>('DELETE', `/api/models/${enc(id)}`),

  /** Keys for other machines; 403 unless called from the node's own machine. */
  listKeys: () => request<KeysResponse>('GET', '/api/keys'),
  createKey: (name: string, scope: KeyScope = 'use') => request<CreatedKey>('POST', '/api/keys', { name, scope }),
  revokeKey: (id: string) => request<void>('DELETE', `/api/keys/${enc(id)}`),
  /** What `hearth-node connect` prints for each coding agent (the focus model, else `model`). */
  agents: (model?: string) =>
    request<AgentsResponse>('GET', `/api/agents${model ? `?model=${enc(model)}` : ''}`),

  /** The LAN cluster; changes are 403 unless made from the node's own machine. */
  cluster: () => request<ClusterView>('GET', '/api/cluster'),
  addPeer: (address: string) => request<{ address: string }>('POST', '/api/cluster/peers', { address }),
  removePeer: (address: string) => request<void>('DELETE', `/api/cluster/peers/${enc(address)}`),
  patchCluster: (patch: ClusterPatch) => request<ClusterView>('PATCH', '/api/cluster', patch),
  /** How much of this machine to give (0-100); 403 unless from the node's own machine. */
  node: () => request<NodeSettings>('GET', '/api/node'),
  setEmbeddingModel: (documents_embedding_model: string | null) =>
    request<NodeSettings>('PATCH', '/api/node', { documents_embedding_model }),
  setThrottleCap: (throttle_cap: number) =>
    request<{ throttle_cap: number; throttle: number }>('PATCH', '/api/node', { throttle_cap }),

  /** MCP servers and their tools; every call is 403 unless from the node's own machine. */
  mcpServers: async (): Promise<McpServer[]> => (await request<{ servers: McpServer[] }>('GET', '/api/mcp/servers')).servers,
  /** 409 when the name is taken, 400 for a bad spec; nothing starts until it is needed. */
  addMcpServer: (spec: McpServerSpec) => request<McpServer>('POST', '/api/mcp/servers', spec),
  /** Replaces the spec of server `name` (the spec's own name must be the same). */
  putMcpServer: (name: string, spec: McpServerSpec) => request<McpServer>('PUT', `/api/mcp/servers/${enc(name)}`, spec),
  removeMcpServer: (name: string) => request<{ removed: string }>('DELETE', `/api/mcp/servers/${enc(name)}`),
  /** Starts the server if it must; 502 `mcp_failed` with the reason when it cannot. */
  mcpTools: async (name: string): Promise<McpTool[]> =>
    (await request<{ tools: McpTool[] }>('GET', `/api/mcp/servers/${enc(name)}/tools`)).tools,
  /** The server's last stderr lines. */
  mcpLog: async (name: string): Promise<string[]> =>
    (await request<{ lines: string[] }>('GET', `/api/mcp/servers/${enc(name)}/log`)).lines,
  importMcp: (body: McpImportRequest) => request<McpImportResult>('POST', '/api/mcp/import', body),
  /** The tools allowed for good (`server__tool`). */
  mcpAllowed: async (): Promise<string[]> => (await request<{ always: string[] }>('GET', '/api/mcp/allowed')).always,
  forgetMcpAllowed: (tool: string) => request<unknown>('DELETE', `/api/mcp/allowed/${enc(tool)}`),
};
