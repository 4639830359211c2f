/**
 * The node's health, live from `/api/events`: thermal level (labelled as an estimate when it
 * comes from CPU pressure), throttle, busy slots, queue, tokens/s, CPU and memory, each with a
 * sparkline of the last five minutes; a banner while serving is paused; what computes (the GPU
 * and the model's layers there, the devices, the CPU variant: `ComputeCard`).
 */
import type { ReactNode } from 'react';
import { formatBytesOf, formatNumber } from '../format';
import { HISTORY_WINDOW_MS, type LiveState, type Sample } from '../status/live';
import { ComputeCard } from './ComputeCard';
import { Sparkline } from './Sparkline';

interface MetricProps {
  testId: string;
  label: string;
  value: ReactNode;
  raw: number | null;
  note?: ReactNode;
  tone?: string;
  series: keyof Omit<Sample, 'time'>;
  live: LiveState;
  min?: number;
  max?: number;
}

function Metric({ testId, label, value, raw, note, tone, series, live, min, max }: MetricProps) {
  const history = live.history;
  const now = history.length ? history[history.length - 1].time : Date.now();
  const points = history.map((s) => ({ time: s.time, value: s[series] }));
  return (
    <div className={`card metric${tone ? ` tone-${tone}` : ''}`}>
      <div className="metric-label">{label}</div>
      <div className="metric-value" data-testid={testId} data-value={raw ?? ''}>
        {value}
      </div>
      <Sparkline
        points={points}
        now={now}
        windowMs={HISTORY_WINDOW_MS}
        min={min}
        max={max}
        testId={`sparkline-${testId.replace(/^status-/, '')}`}
        label={label}
      />
      {note && <div className="metric-note">{note}</div>}
    </div>
  );
}

const THERMAL_TONE: Record<string, string> = { nominal: 'ok', fair: 'warn', serious: 'bad', critical: 'bad' };

export function StatusPage({ live }: { live: LiveState }) {
  const { thermal, memory } = live;
  const estimated = thermal?.source === 'estimated';
  const thermalNote = !thermal
    ? null
    : estimated
      ? `Derived from CPU pressure (${formatNumber(thermal.value)} % of time tasks waited for a CPU over the last 10 s): this machine has no temperature sensors.`
      : `Hottest sensor: ${formatNumber(thermal.value)} °C.`;

  return (
    <section className="page" aria-label="Status">
      <div className="page-head">
        <h1>Status</h1>
        <p className="muted">
          Node <strong data-testid="status-node">{live.node ?? '—'}</strong> · model{' '}
          <strong data-testid="status-model">{live.model.id ?? 'none'}</strong> ({live.model.state}) · updated every second
        </p>
      </div>
      {live.connection !== 'open' && (
        <div className="banner warn" role="status" data-testid="status-disconnected">
          {live.connection === 'connecting' ? 'Connecting to the node…' : 'Connection lost. Reconnecting…'}
        </div>
      )}
      {live.paused && (
        <div className="banner warn" role="status" data-testid="status-paused">
          <strong>Paused.</strong> Serving is paused from the desktop app's tray menu: the throttle is 0 and answers wait
          until it is resumed.
        </div>
      )}
      <div className="metrics">
        <Metric
          testId="status-thermal"
          label="Thermal"
          live={live}
          series="thermal_value"
          raw={thermal?.value ?? null}
          tone={thermal ? THERMAL_TONE[thermal.level] : undefined}
          value={
            thermal ? (
              <>
                <span data-testid="status-thermal-level">{thermal.level}</span>
                {estimated && (
                  <span className="estimated" data-testid="status-thermal-estimated">
                    {' '}
                    (estimated)
                  </span>
                )}
              </>
            ) : (
              '—'
            )
          }
          note={thermalNote}
        />
        <Metric
          testId="status-throttle"
          label="Throttle"
          live={live}
          series="throttle"
          min={0}
          max={100}
          raw={live.throttle}
          value={live.throttle === null ? '—' : `${formatNumber(live.throttle, 0)} %`}
          note={
            live.paused
              ? 'Paused from the desktop app: 0 % until serving is resumed.'
              : '100 % is full speed; the node slows down as it heats up.'
          }
        />
        <Metric
          testId="status-slots"
          label="Slots busy"
          live={live}
          series="active"
          min={0}
          max={live.slots ?? undefined}
          raw={live.active}
          value={live.active === null ? '—' : `${live.active}/${live.slots ?? '?'}`}
        />
        <Metric
          testId="status-queue"
          label="Queue depth"
          live={live}
          series="queued"
          raw={live.queued}
          value={live.queued === null ? '—' : String(live.queued)}
        />
        <Metric
          testId="status-tokens-per-s"
          label="Tokens/s"
          live={live}
          series="tokens_per_s"
          raw={live.tokens_per_s}
          value={formatNumber(live.tokens_per_s)}
        />
        <Metric
          testId="status-cpu"
          label="CPU"
          live={live}
          series="cpu_percent"
          min={0}
          max={100}
          raw={live.cpu_percent}
          value={live.cpu_percent === null ? '—' : `${formatNumber(live.cpu_percent, 0)} %`}
        />
        <Metric
          testId="status-memory"
          label="Memory"
          live={live}
          series="memory_used"
          min={0}
          max={memory?.total_bytes}
          raw={memory?.used_bytes ?? null}
          value={memory ? formatBytesOf(memory.used_bytes, memory.total_bytes) : '—'}
        />
      </div>
      <ComputeCard model={live.model} />
    </section>
  );
}
