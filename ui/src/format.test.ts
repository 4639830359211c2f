import { describe, expect, it } from 'vitest';
import { formatBytes, formatBytesOf, formatContext, formatMs, formatNumber, percent } from './format';

describe('format', () => {
  it('formats sizes in binary units', () => {
    expect(formatBytes(98362432)).toBe('93.8 MB');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(25769803776)).toBe('24.0 GB');
    expect(formatBytes(undefined)).toBe('—');
    expect(formatBytesOf(2147483648, 25769803776)).toBe('2.0 / 24.0 GB');
    expect(formatBytesOf(1, 0)).toBe('—');
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
});
