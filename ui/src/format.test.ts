import { describe, expect, it } from 'vitest';
import { formatAgo, formatBytes, formatBytesOf, formatContext, formatDateTime, formatMs, formatNumber, formatPlacement, percent } from './format';

describe('format', () => {
  it('formats sizes in binary units', () => {
    expect(formatBytes(98362432)).toBe('93.8 MB');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(25769803776)).toBe('24.0 GB');
    expect(formatBytes(undefined)).toBe('—');
    expect(formatBytesOf(2147483648, 25769803776)).toBe('2.0 / 24.0 GB');
    expect(formatBytesOf(1, 0)).toBe('—');
  });

  it('says where a model\'s layers are', () => {
    const p = (backend: string, devices: string[], layers: number) => ({ backend, devices, layers, layers_total: 31 });
    expect(formatPlacement(p('Vulkan', ['Vulkan0'], 31))).toBe('GPU 31/31 · Vulkan0');
    expect(formatPlacement(p('CUDA', ['CUDA0', 'CUDA1'], 20))).toBe('GPU 20/31 · CUDA0, CUDA1');
    expect(formatPlacement(p('CPU', [], 0))).toBe('CPU');
    expect(formatPlacement(p('Vulkan', ['Vulkan0'], 0))).toBe('CPU');
    expect(formatPlacement(p('RPC', ['127.0.0.1:5000'], 16))).toBe('Split 16/31 · peers');
    expect(formatPlacement(undefined)).toBe('—');
  });

  it('formats numbers, durations, contexts and percents', () => {
    expect(formatNumber(88.14)).toBe('88.1');
    expect(formatNumber(80)).toBe('80');
    expect(formatNumber(null)).toBe('—');
    expect(formatMs(231.4)).toBe('231 ms');
    expect(formatMs(1534)).toBe('1.53 s');
    expect(formatContext(8192)).toBe('8K');
    expect(formatContext(2000)).toBe('2000');
    expect(percent(0.425)).toBe(43);
    expect(percent(1.7)).toBe(100);
    expect(percent(Number.NaN)).toBe(0);
  });

  it('formats past moments relative to now', () => {
    const now = 1_800_000_000_000;
    expect(formatAgo(null, now)).toBe('never');
    expect(formatAgo(undefined, now)).toBe('—');
    expect(formatAgo(now - 5_000, now)).toBe('just now');
    expect(formatAgo(now + 60_000, now)).toBe('just now');
    expect(formatAgo(now - 5 * 60_000, now)).toBe('5 min ago');
    expect(formatAgo(now - 3 * 3_600_000 - 1, now)).toBe('3 h ago');
    expect(formatAgo(now - 30 * 3_600_000, now)).toBe('yesterday');
    expect(formatAgo(now - 3 * 86_400_000, now)).toBe('3 days ago');
    expect(formatAgo(now - 90 * 86_400_000, now)).toBe(new Date(now - 90 * 86_400_000).toLocaleDateString());
    expect(formatDateTime(null)).toBe('');
    expect(formatDateTime(now)).toBe(new Date(now).toLocaleString());
  });
});
