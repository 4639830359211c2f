/**
 * Geometry of the small live charts: a series of (time, value) points -> an SVG path over a
 * fixed time window ending at `now`. Pure, so it is tested without a DOM.
 */

export interface Point {
  time: number;
  value: number;
}

export interface SparklineBox {
  width: number;
  height: number;
  /** The right edge. */
  now: number;
  windowMs: number;
  /**
   * While the history is younger than the window, draw it over at least this span (ending at
   * `now`) instead of squeezing it against the right edge; default: the whole window.
   */
  minSpanMs?: number;
  /** Value at the bottom edge (default 0). */
  min?: number;
  /** Value at the top edge (default: the largest value, at least `minRange` above `min`). */
  max?: number;
  minRange?: number;
}

/** Width of the tick drawn for a single sample, in box units. */
const SINGLE_SAMPLE_TICK = 6;

export interface SparklineShape {
  /** The line, `M x y L x y ...`; '' when there is nothing to draw. */
  line: string;
  /** The same line closed down to the bottom edge, for a fill; '' with the line. */
  area: string;
}

export function sparklinePath(points: readonly Point[], box: SparklineBox): SparklineShape {
  const windowStart = box.now - box.windowMs;
  const visible = points.filter((p) => p.time >= windowStart && p.time <= box.now && Number.isFinite(p.value));
  if (visible.length === 0) return { line: '', area: '' };
  const minSpan = Math.min(box.windowMs, box.minSpanMs ?? box.windowMs);
  const start = Math.max(windowStart, Math.min(visible[0].time, box.now - minSpan));
  const span = box.now - start;
  const min = box.min ?? 0;
  const top = box.max ?? Math.max(min + (box.minRange ?? 1), ...visible.map((p) => p.value));
  const range = top - min || 1;
  const pad = 1; // keep the stroke inside the box
  const x = (t: number) => ((t - start) / span) * box.width;
  const y = (v: number) => {
    const f = Math.min(1, Math.max(0, (v - min) / range));
    return pad + (1 - f) * (box.height - 2 * pad);
  };
  const xs = visible.map((p) => x(p.time));
  const ys = visible.map((p) => y(p.value));
  if (xs.length === 1) {
    // One sample: a short flat tick ending at it, so it is visible at all.
    xs.unshift(Math.max(0, xs[0] - SINGLE_SAMPLE_TICK));
    ys.unshift(ys[0]);
  }
  const coords = xs.map((xi, i) => `${xi.toFixed(1)} ${ys[i].toFixed(1)}`);
  const line = `M ${coords.join(' L ')}`;
  const bottom = box.height.toFixed(1);
  const area = `${line} L ${xs[xs.length - 1].toFixed(1)} ${bottom} L ${xs[0].toFixed(1)} ${bottom} Z`;
  return { line, area };
}
