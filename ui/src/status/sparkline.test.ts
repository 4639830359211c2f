import { describe, expect, it } from 'vitest';
import { sparklinePath } from './sparkline';

const box = { width: 100, height: 20, now: 1000, windowMs: 1000 };

function coords(path: string): number[][] {
  return path
    .replace(/^M /, '')
    .split(' L ')
    .map((p) => p.split(' ').map(Number));
}

describe('sparklinePath', () => {
  it('draws nothing without points in the window', () => {
    expect(sparklinePath([], box)).toEqual({ line: '', area: '' });
    expect(sparklinePath([{ time: -5, value: 1 }], box).line).toBe('');
  });

  it('maps time to x over the window and value to y (top = max)', () => {
    const { line, area } = sparklinePath(
      [
        { time: 0, value: 0 },
        { time: 500, value: 10 },
        { time: 1000, value: 5 },
      ],
      { ...box, max: 10 },
    );
    expect(coords(line)).toEqual([
      [0, 19],
      [50, 1],
      [100, 10],
    ]);
    expect(area.endsWith('L 100.0 20.0 L 0.0 20.0 Z')).toBe(true);
  });

  it('scales to the largest value when no max is given and clamps outside values', () => {
    const line = sparklinePath(
      [
        { time: 500, value: 4 },
        { time: 1000, value: 2 },
      ],
      box,
    ).line;
    expect(coords(line).map(([, y]) => y)).toEqual([1, 10]);
    const clamped = sparklinePath([{ time: 1000, value: 50 }, { time: 900, value: -3 }], { ...box, max: 10 }).line;
    expect(coords(clamped).map(([, y]) => y)).toEqual([1, 19]);
  });

  it('spreads a young history over the minimum span instead of the whole window', () => {
    const points = [
      { time: 900, value: 1 },
      { time: 1000, value: 1 },
    ];
    // Over the full window the two samples sit in the last tenth...
    expect(coords(sparklinePath(points, box).line).map(([x]) => x)).toEqual([90, 100]);
    // ...over a minimum span of 200 they take the right half...
    expect(coords(sparklinePath(points, { ...box, minSpanMs: 200 }).line).map(([x]) => x)).toEqual([50, 100]);
    // ...and a history older than the minimum span fills the box from its first sample.
    expect(coords(sparklinePath(points, { ...box, minSpanMs: 50 }).line).map(([x]) => x)).toEqual([0, 100]);
  });

  it('draws a visible tick for a single sample', () => {
    expect(coords(sparklinePath([{ time: 1000, value: 1 }], box).line)).toHaveLength(2);
  });
});
