/** Display formatting of sizes, rates and durations; pure. */

const BYTE_UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** 98362432 -> "93.8 MB" (binary multiples, as file managers show model files). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes) || bytes < 0) return '—';
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}

/** "2.0 / 24.0 GB": used and total in the unit of the total. */
export function formatBytesOf(used: number, total: number): string {
  if (!Number.isFinite(used) || !Number.isFinite(total) || total <= 0) return '—';
  let unit = 0;
  let scale = 1;
  while (total / scale >= 1024 && unit < BYTE_UNITS.length - 1) {
    scale *= 1024;
    unit++;
  }
  return `${(used / scale).toFixed(1)} / ${(total / scale).toFixed(1)} ${BYTE_UNITS[unit]}`;
}

/** A number with at most `digits` decimals, or "—" when there is none. */
export function formatNumber(value: number | null | undefined, digits = 1): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '—';
  return value.toFixed(digits).replace(/\.0+$/, '');
}

/** 231 -> "231 ms", 1534 -> "1.53 s". */
export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** 8192 -> "8K", 131072 -> "128K", 2000 -> "2000". */
export function formatContext(tokens: number | null | undefined): string {
  if (tokens === null || tokens === undefined || !Number.isFinite(tokens)) return '—';
  return tokens >= 1024 && tokens % 1024 === 0 ? `${tokens / 1024}K` : String(tokens);
}

/** A 0..1 fraction as a whole percent, clamped. */
export function percent(fraction: number): number {
  if (!Number.isFinite(fraction)) return 0;
  return Math.round(Math.min(1, Math.max(0, fraction)) * 100);
}

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;

/**
 * A past moment relative to `now`: "just now", "5 min ago", "3 h ago", "2 days ago", then the
 * date. `null` is "never" (a key not used yet); a moment ahead of `now` (skewed clocks) is "just now".
 */
export function formatAgo(ms: number | null | undefined, now: number): string {
  if (ms === null) return 'never';
  if (ms === undefined || !Number.isFinite(ms)) return '—';
  const age = now - ms;
  if (age < MINUTE_MS) return 'just now';
  if (age < HOUR_MS) return `${Math.floor(age / MINUTE_MS)} min ago`;
  if (age < DAY_MS) return `${Math.floor(age / HOUR_MS)} h ago`;
  const days = Math.floor(age / DAY_MS);
  if (days < 30) return days === 1 ? 'yesterday' : `${days} days ago`;
  return new Date(ms).toLocaleDateString();
}

/** The full local date and time of a moment (for a tooltip). */
export function formatDateTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
  return new Date(ms).toLocaleString();
}

/** Where a model's layers are, in a few words: "GPU 31/31 · Vulkan0", "GPU 20/33 · CUDA0", "CPU". */
export function formatPlacement(p: { backend: string; devices: string[]; layers: number; layers_total: number } | undefined): string {
  if (!p) return '—';
  if (p.layers === 0 || p.backend === 'CPU') return 'CPU';
  const where = p.backend === 'RPC' ? 'peers' : p.devices.join(', ');
  const kind = p.backend === 'RPC' ? 'Split' : 'GPU';
  return `${kind} ${p.layers}/${p.layers_total}${where ? ` · ${where}` : ''}`;
}
