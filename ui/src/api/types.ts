/**
 * The node's `/api` wire types (docs/API.md), field names exactly as on the wire, and the
 * tolerant parsers for the two streams the UI reads (chat SSE events and `/api/events`).
 * Unknown event types parse to `null` and are ignored, so a newer node does not break the UI.
 */
import { parseToolCall, type ToolCall } from './mcpTypes';

export type MessageStatus = 'complete' | 'streaming' | 'stopped' | 'interrupted' | 'error';
export type Role = 'user' | 'assistant';

export interface MessageStats {
  tokens: number;
  tokens_per_s: number;
  ttft_ms: number;
  /** The prompt's tokens and those kept from an earlier answer (absent from older nodes). */
  prompt_tokens?: number;
  cached_tokens?: number;
}

/** An image a message carries; its file is at `/api/images/{id}`. */
export interface MessageImage {
  id: string;
  mime: string;
  width: number;
  height: number;
  /** The file's size in bytes. */
  size: number;
  /** The file on this page, before the node stored it (a data URL): a sent message's preview. */
  local_url?: string;
}

/** An audio clip a message carries; its file is at `/api/audio/{id}`. */
export interface MessageAudio {
  id: string;
  /** `wav` or `mp3`. */
  format: string;
  /** The file's size in bytes. */
  size: number;
  /** The file on this page, before the node stored it (a data URL). */
  local_url?: string;
}

export interface Message {
  id: string;
  conversation_id: string;
  role: Role;
  content: string;
  status: MessageStatus;
  model: string | null;
  node: string | null;
  error: string | null;
  stats: MessageStats | null;
  created_at: number;
  /** Its images, in order (absent from a node older than images). */
  images?: MessageImage[];
  /** Its audio clips, in order (absent from a node older than audio in the chat). */
  audio?: MessageAudio[];
  /** The MCP tool calls an answer made, in order (`null` or absent when it made none). */
  tool_calls?: ToolCall[] | null;
  /** What an answer was given of the conversation's documents (`null` or absent: none). */
  sources?: Sources | null;
}

/** The node's own settings (`GET /api/node`). */
export interface NodeSettings {
  throttle_cap: number;
  throttle: number;
  /** The model whose embeddings find a chat's passages besides their words; null: words alone. */
  documents_embedding_model: string | null;
}

/** A document attached to a conversation, read and indexed by the node. */
export interface DocumentInfo {
  id: string;
  name: string;
  /** `text`, `markdown`, `pdf` or `docx`. */
  kind: string;
  digest: string;
  bytes: number;
  /** A PDF's pages. */
  pages: number | null;
  /** The passages it was cut into. */
  passages: number;
  created_at: number;
}

/** One source an answer was given: a passage, or a whole document (`whole`). */
export interface Source {
  n: number;
  document_id: string;
  document: string;
  page: number | null;
  heading: string | null;
  /** The passage, or a whole document's first lines. */
  text: string;
  whole: boolean;
}

/** The sources of an answer: the documents whole, or the passages retrieved for its question. */
export interface Sources {
  path: 'whole' | 'passages';
  /** The conversation's documents then. */
  documents: number;
  items: Source[];
  /** Milliseconds the turn spent choosing them. */
  ms?: number;
  /** The embedding model whose nearest passages were fused with the words' ones. */
  embedder?: string | null;
  /** The reranker that ordered them. */
  reranker?: string | null;
}

/** Whether the model may answer without calling a tool (`first`: a turn's first answer must). */
export type ToolChoice = 'auto' | 'first' | 'required';

export interface ConversationSettings {
  system_prompt: string;
  temperature: number;
  top_p: number;
  max_tokens: number | null;
  /** Offer the tools of the enabled MCP servers (absent from a node older than tools: true). */
  tools?: boolean;
  /** The most answers with tool calls one turn may chain, 1-50 (absent from older nodes: 10). */
  tool_steps?: number;
  /** Whether a turn's answers must call a tool: none, its first, or every one (absent from older nodes: `auto`). */
  tool_choice?: ToolChoice;
}

export interface Conversation {
  id: string;
  title: string;
  created_at: number;
  updated_at: number;
  settings: ConversationSettings;
  /** The images its messages carry and their bytes (absent from a node older than images). */
  images?: number;
  image_bytes?: number;
  /** The audio clips its messages carry and their bytes (absent from older nodes). */
  clips?: number;
  clip_bytes?: number;
}

export interface ConversationDetail {
  conversation: Conversation;
  messages: Message[];
}

export interface ConversationPatch {
  title?: string;
  settings?: Partial<ConversationSettings>;
}

/** The three bodies `POST /api/conversations/{id}/chat` accepts. */
export type ChatRequest =
  | { content: string; images?: string[]; audio?: string[] }
  | { regenerate: true }
  | { edit_message_id: string; content: string };

export type ChatEvent =
  | { type: 'user'; message: Message }
  | { type: 'start'; message: Message }
  | { type: 'token'; text: string }
  /** `next`: the answer made calls and the loop goes on (another `start` may follow). */
  | { type: 'done'; message: Message; next?: boolean }
  | { type: 'error'; error: string; message: Message | null }
  /** A call an answer made (`tool_call`), or a change of its state (`tool_update`). */
  | { type: 'tool_call' | 'tool_update'; message_id: string; call: ToolCall }
  /** These calls wait for the user; the stream ends. */
  | { type: 'consent'; message_id: string; calls: string[] }
  /** Something the user should know (step limit reached, a server failed, no tools). */
  | { type: 'notice'; text: string };

export type ModelState = 'loading' | 'ready' | 'failed' | 'stopped' | 'empty';

/** Where a loaded model's layers are: the GPU (how many of llama.cpp's units, video memory) or the CPU. */
export interface Placement {
  /** `Vulkan`, `CUDA`, `Metal`, `RPC` (a split model's peers) or `CPU`. */
  backend: string;
  devices: string[];
  device_descriptions: string[];
  layers: number;
  layers_total: number;
  vram_bytes: number;
  /** Why fewer layers than asked are on the GPU. */
  note?: string;
}

/** A device llama.cpp computes on (`/api/status`'s `compute.devices`). */
export interface ComputeDevice {
  name: string;
  description: string;
  backend: string;
  kind: 'cpu' | 'gpu' | 'integrated_gpu' | 'accelerator' | 'remote' | 'unknown';
  memory_total: number;
  memory_free: number;
}

export interface Compute {
  /** The CPU variant llama.cpp picked at start (`haswell`, `icelake`...), and its features. */
  cpu_variant: string | null;
  cpu_features: string[];
  devices: ComputeDevice[];
}

export interface ModelStatus {
  id: string | null;
  state: ModelState;
  progress: number;
  error?: string;
  /** Ready: its context in tokens (one KV pool its slots share), the KV cache's type, the
   * pool's memory and the host memory its prompt cache may take. */
  context?: number;
  kv_type?: string;
  kv_bytes?: number;
  cache_ram?: number;
  /** Ready: where its layers are (absent from older nodes). */
  placement?: Placement;
  /** Ready: its projector reads images / hears audio clips. */
  vision?: boolean;
  audio?: boolean;
}

export interface StatusResponse {
  model: ModelStatus;
  node: string;
  slots: number;
  active: number;
  queued: number;
  tokens_generated: number;
  requests_finished: number;
  /** The throttle in force, 0-100, and the user's cap on it (Settings). */
  throttle?: number;
  throttle_cap?: number;
  /** What computes (absent from older nodes). */
  compute?: Compute;
}

export type ThermalLevel = 'nominal' | 'fair' | 'serious' | 'critical';

export interface Thermal {
  level: ThermalLevel;
  source: 'sensors' | 'estimated';
  value: number;
}

export interface TelemetrySnapshot {
  type: 'status';
  time: number;
  model: ModelStatus;
  node: string;
  slots: number;
  active: number;
  queued: number;
  tokens_per_s: number;
  thermal: Thermal;
  throttle: number;
  /** Serving paused from the desktop app's tray (the throttle is then 0); absent on older nodes. */
  paused?: boolean;
  cpu_percent: number;
  memory: { used_bytes: number; total_bytes: number };
}

export interface ModelEvent {
  type: 'model';
  id: string | null;
  state: ModelState;
  progress: number;
  error?: string;
  /** Where a ready model computes. */
  placement?: Placement;
  /** A ready model's projector reads images / hears audio clips. */
  vision?: boolean;
  audio?: boolean;
}

export type LiveEvent = TelemetrySnapshot | ModelEvent;

export interface ModelInfo {
  id: string;
  file: string;
  size_bytes?: number;
  architecture?: string;
  quantization?: string;
  context_length?: number;
  parameters?: string;
  loaded: boolean;
  /** Here: loaded, loading, failed, or only on disk (absent from older nodes). */
  state?: 'loaded' | 'loading' | 'failed' | 'available';
  /** Times it was loaded since the node started. */
  loads?: number;
  /** Seconds until it unloads unless used (a model loaded for a request). */
  unloads_in_s?: number;
  /** While it loads: how far, 0 to 1 (any model, not only the one the header shows). */
  load_progress?: number;
  /** Why its last load failed (state `failed`): shown on its row. */
  load_error?: string;
  /** Imported from another app (a link to its file). */
  imported?: boolean;
  /** Where the linked file is (shown to this machine only). */
  linked_to?: string;
  /** Loaded from outside the models folder (`--model PATH`): listed while it is loaded. */
  outside?: boolean;
  shards?: number;
  error?: string;
  /** It sees images: a vision projector beside it (loaded: one that reads them). */
  vision?: boolean;
  /** It hears audio clips: its projector has an audio encoder. */
  audio?: boolean;
  /** The cluster's peers that have it loaded. */
  on_peers?: string[];
  /** Loaded: where its layers are. */
  placement?: Placement;
  /** Loaded: its context in tokens (one KV pool its slots share), the KV cache's type and memory. */
  context?: number;
  kv_type?: string;
  kv_bytes?: number;
}

/** A model only the cluster's peers have (loaded), offered for a transfer. */
export interface PeerModel {
  id: string;
  peers: string[];
}

/** One model of a hub repository the search found, marked by whether it fits here. */
export interface FoundFile {
  name: string;
  /** What to download: OWNER/REPO/PATH. */
  spec: string;
  /** Bytes, every shard counted. */
  size: number;
  quant: string | null;
  shards: number;
  /** The bytes of the vision projector that comes with it (it sees images); absent: none. */
  projector_size?: number;
  /** The memory it is expected to take here. */
  needs: number;
  fits: boolean;
  /** It fits whole in video memory. */
  on_gpu: boolean;
  /** A file of that name is in the models folder already. */
  here: boolean;
}

/** `GET /api/models/search?q=`: the hub's GGUF repositories, the most downloaded first. */
export interface SearchAnswer {
  query: string;
  hub: string;
  /** The context a request gets here, which the fit marks assume. */
  context: number;
  repos: {
    id: string;
    downloads: number;
    likes: number;
    last_modified: string | null;
    files: FoundFile[];
    error?: string;
  }[];
}

/** A download from the hub or from peers (`GET /api/models/downloads`). */
export interface Download {
  /** The file's name in the models folder. */
  id: string;
  /** OWNER/REPO/FILE on the hub, or the model's name on the peers. */
  model: string;
  state: 'starting' | 'downloading' | 'retrying' | 'verifying' | 'done' | 'failed' | 'cancelled';
  received: number;
  total: number | null;
  bytes_per_second: number;
  seconds_left: number | null;
  sha256: string | null;
  retries: number;
  /** Bytes already here when this run started (a resumed download). */
  resumed_from: number;
  /** The peers it comes from (none from the hub). */
  sources: string[];
  error: string | null;
}

/** Where a split model's layers are (`GET /api/models/split`). */
export interface SplitPlacement {
  model: string;
  /** Layers on this machine, and about the bytes of weights they take. */
  local_layers: number;
  local_bytes: number;
  peers: { name: string; addr: string; layers: number; bytes: number }[];
  state: 'loading' | 'ready' | 'failed';
  /** Why it failed (which peer was lost); it loads again once peers share memory. */
  error?: string;
}

export interface SplitsResponse {
  splits: SplitPlacement[];
  /** Whether this node lets peers' split models use its memory (--share-memory). */
  share_memory: boolean;
  /** The most memory it gives them, in MiB (null: what is free). */
  share_memory_limit_mib: number | null;
}

/** A model Ollama or LM Studio has (`GET /api/models/importable`). */
export interface ImportableModel {
  id: string;
  source: 'ollama' | 'lmstudio';
  path: string;
  size_bytes: number;
  imported: boolean;
}

export interface ModelsResponse {
  models: ModelInfo[];
  /** What the models folder takes on disk (imported models' links take nothing). */
  disk_bytes?: number;
  from_peers?: PeerModel[];
  /** The model the node shows as its own (the last one loaded). */
  loaded: string | null;
  /** Every model loaded here. */
  loaded_models?: string[];
  state: ModelState;
  /** Where the node looks for GGUF files (absent from older nodes). */
  models_dir?: string;
}

/** What a key reaches: the models (`use`), or the node's data and settings too (`manage`). */
export type KeyScope = 'use' | 'manage';

/** An API key for other machines (`GET /api/keys`); the secret itself is never listed. */
export interface ApiKey {
  id: string;
  name: string;
  /** The visible start of the secret, e.g. `hearth_1a2b3c4`. */
  prefix: string;
  /** `use`: the model doors only; `manage`: also this UI's API (absent from older nodes). */
  scope?: KeyScope;
  created_at: number;
  last_used_at: number | null;
  revoked: boolean;
}

export interface KeysResponse {
  keys: ApiKey[];
  /** Whether the node is shared on the LAN right now. */
  exposed: boolean;
}

/** `POST /api/keys`: the new key and its secret, shown this once. */
export interface CreatedKey {
  key: ApiKey;
  secret: string;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isMessage(v: unknown): v is Message {
  return isObject(v) && typeof v.id === 'string' && typeof v.role === 'string';
}

/** One `data:` payload of the chat stream; `null` for anything unknown or malformed. */
export function parseChatEvent(data: string): ChatEvent | null {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return null;
  }
  if (!isObject(v)) return null;
  switch (v.type) {
    case 'user':
    case 'start':
      return isMessage(v.message) ? ({ type: v.type, message: v.message } as ChatEvent) : null;
    case 'done':
      if (!isMessage(v.message)) return null;
      return v.next === true ? { type: 'done', message: v.message, next: true } : { type: 'done', message: v.message };
    case 'tool_call':
    case 'tool_update': {
      const call = parseToolCall(v.call);
      return call && typeof v.message_id === 'string' ? { type: v.type, message_id: v.message_id, call } : null;
    }
    case 'consent':
      return typeof v.message_id === 'string' && Array.isArray(v.calls)
        ? { type: 'consent', message_id: v.message_id, calls: v.calls.filter((c): c is string => typeof c === 'string') }
        : null;
    case 'notice':
      return typeof v.text === 'string' ? { type: 'notice', text: v.text } : null;
    case 'token':
      return typeof v.text === 'string' ? { type: 'token', text: v.text } : null;
    case 'error':
      return {
        type: 'error',
        error: typeof v.error === 'string' ? v.error : 'The generation failed',
        message: isMessage(v.message) ? v.message : null,
      };
    default:
      return null;
  }
}

/** One `/api/events` WebSocket message; `null` for anything unknown or malformed. */
export function parseLiveEvent(data: string): LiveEvent | null {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return null;
  }
  if (!isObject(v)) return null;
  if (v.type === 'status' && typeof v.time === 'number' && isObject(v.model)) {
    return v as unknown as TelemetrySnapshot;
  }
  if (v.type === 'model' && typeof v.state === 'string') {
    return v as unknown as ModelEvent;
  }
  return null;
}

/** One connected peer in `GET /api/cluster`. */
export interface ClusterPeer {
  name: string;
  device_id: string;
  addr: string;
  /** `hearth` (encrypted) or `tealenet` (plain text). */
  kind: string;
  outbound: boolean;
  degraded: boolean;
  loaded_models: string[];
  thermal_level: string;
  throttle: number;
  queue_depth: number;
  is_generating: boolean;
  silent_ms: number;
  /** Measured decode speed of one stream there (0 until measured). */
  tokens_per_s: number;
}

export interface KnownPeer {
  address: string;
  added_at: number;
  connected_at: number | null;
}

/** `GET /api/cluster`. */
export interface ClusterView {
  name: string;
  device_id: string;
  port: number | null;
  passcode_set: boolean;
  tealenet_compat: boolean;
  dialing: string[];
  known: KnownPeer[];
  peers: ClusterPeer[];
}

/** `PATCH /api/cluster`: a passcode string sets it, `null` clears it. */
export interface ClusterPatch {
  passcode?: string | null;
  tealenet_compat?: boolean;
}

/** One coding agent in `GET /api/agents`: what `hearth-node connect` prints for this node. */
export interface AgentSettings {
  /** `claude`, `codex`, `qwen`, `opencode` or `continue` (as `hearth-node connect` takes it). */
  id: string;
  name: string;
  /** The settings to paste, naming this node's address, the model and the key. */
  text: string;
  /** About how many tokens the agent's own prompt (system prompt and tools) takes. */
  prompt_tokens: number;
  /** The model's context in tokens; null when not known (not loaded here). */
  model_context: number | null;
  /** The model's context is smaller than the agent's own prompt. */
  too_small: boolean;
}

/** `GET /api/agents`. */
export interface AgentsResponse {
  url: string;
  model: string;
  model_context: number | null;
  /** Shared on the LAN: the texts then hold `key_placeholder` where a key goes. */
  shared: boolean;
  key_placeholder: string | null;
  agents: AgentSettings[];
}
