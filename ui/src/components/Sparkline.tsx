/** A small live chart of one metric over the last five minutes (geometry in status/sparkline.ts). */
import { sparklinePath, type Point } from '../status/sparkline';

const WIDTH = 120;
const HEIGHT = 32;
/** A young history is drawn over at least one minute, then over the growing history. */
const MIN_SPAN_MS = 60_000;

export interface SparklineProps {
  points: Point[];
  now: number;
  windowMs: number;
  min?: number;
  max?: number;
  testId: string;
  label: string;
}

export function Sparkline({ points, now, windowMs, min, max, testId, label }: SparklineProps) {
  const { line, area } = sparklinePath(points, {
    width: WIDTH,
    height: HEIGHT,
    now,
    windowMs,
    minSpanMs: MIN_SPAN_MS,
    min,
    max,
  });
  return (
    <svg
      className="sparkline"
      viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={`${label}, last 5 minutes`}
      data-testid={testId}
      data-points={points.length}
    >
      {area && <path className="spark-area" d={area} />}
      {line && <path className="spark-line" d={line} vectorEffect="non-scaling-stroke" />}
    </svg>
  );
}
