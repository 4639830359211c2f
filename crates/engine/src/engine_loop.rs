//! The loop every engine thread runs, whatever produces its tokens: take commands (blocking
//! only when there is nothing to do, polling briefly while slow readers hold work back), pause
//! decoding at throttle 0 while controls still work, run a duty cycle below 100, and hand each
//! turn's events to their readers through the courier. Both backends, llama.cpp's scheduler
//! and the scripted engine, step through [`Backend`], so tests of the doors that use the
//! scripted engine run the production loop. Also what the loop, the backends and the handle
//! share: the live counters ([`Shared`]) and how an engine ends.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use crate::admission::Admission;
use crate::commands::{Command, Courier};
use crate::events::FailureKind;
use crate::model::ModelState;

/// How long an engine with only back-pressured work waits before looking again. Readers wake
/// it as soon as they take an event, so this is only a safety net.
const STALL_POLL: Duration = Duration::from_millis(20);

/// Live counters, updated by the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) admission: Admission,
    pub(crate) active: AtomicUsize,
    pub(crate) tokens_generated: AtomicU64,
    pub(crate) requests_finished: AtomicU64,
    /// Why the engine thread must stop (0: it must not); set by [`Engine::shutdown`] and
    /// [`Engine::unload`], checked every step.
    pub(crate) stopping: AtomicU8,
    /// 0..=100: 0 pauses decoding, below 100 the engine runs a duty cycle (DESIGN.md §4).
    pub(crate) throttle: AtomicU8,
    /// llama.cpp threads the last decode ran with (fewer than configured while other
    /// programs keep cores busy; `cpu_share`).
    pub(crate) threads: AtomicUsize,
    /// Cores' worth of CPU other programs used, as the thread governor last measured it (an
    /// `f64`'s bits).
    pub(crate) cpu_others: AtomicU64,
    /// One stream's decode speed, tokens/s, averaged over the generations that finished (an
    /// `f64`'s bits; 0 until one has): what placement compares nodes by.
    pub(crate) decode_speed: AtomicU64,
    /// The KV pool and the prompt cache, as the engine thread last left them.
    pub(crate) pool: PoolCounters,
    /// Speculation's guesses, as the engine thread counted them.
    pub(crate) spec: SpecCounters,
}

/// What [`crate::SpecStats`] reports, kept by the engine thread.
#[derive(Debug, Default)]
pub(crate) struct SpecCounters {
    pub(crate) guessed: AtomicU64,
    pub(crate) held: AtomicU64,
    /// Steps with guesses against the same steps without, averaged (an `f64`'s bits; 0: none).
    pub(crate) speedup: AtomicU64,
}

impl SpecCounters {
    pub(crate) fn record_speedup(&self, speedup: f64) {
        let _ = self
            .speedup
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let old = f64::from_bits(bits);
                let new = if old > 0.0 {
                    old + 0.05 * (speedup - old)
                } else {
                    speedup
                };
                Some(new.to_bits())
            });
    }
}

/// What [`crate::PoolStats`] reports, kept by the engine thread.
#[derive(Debug, Default)]
pub(crate) struct PoolCounters {
    pub(crate) kv_used: AtomicU64,
    pub(crate) cache_entries: AtomicU64,
    pub(crate) cache_bytes: AtomicU64,
    pub(crate) cache_restored: AtomicU64,
    pub(crate) parked: AtomicU64,
}

/// How much each finished generation moves the decode speed average.
const SPEED_WEIGHT: f64 = 0.3;

pub(crate) const STOP_SHUTDOWN: u8 = 1;
pub(crate) const STOP_UNLOAD: u8 = 2;

impl Shared {
    /// A generation decoded at `speed` tokens/s ([`crate::Done::decode_speed`]): fold it into
    /// the average.
    pub(crate) fn record_decode(&self, speed: f64) {
        let _ = self
            .decode_speed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let old = f64::from_bits(bits);
                let new = if old > 0.0 {
                    old + SPEED_WEIGHT * (speed - old)
                } else {
                    speed
                };
                Some(new.to_bits())
            });
    }

    /// The average decode speed of one stream, tokens/s (0: not measured yet).
    pub(crate) fn decode_speed(&self) -> f64 {
        f64::from_bits(self.decode_speed.load(Ordering::Relaxed))
    }

    /// Why the engine must stop, if it must.
    pub(crate) fn stop_reason(&self) -> Option<FailureKind> {
        match self.stopping.load(Ordering::Acquire) {
            0 => None,
            STOP_UNLOAD => Some(FailureKind::Unloaded),
            _ => Some(FailureKind::ShuttingDown),
        }
    }
}

/// The state an engine ends in.
pub(crate) fn final_state(reason: FailureKind) -> ModelState {
    match reason {
        FailureKind::Unloaded => ModelState::Unloaded,
        _ => ModelState::Stopped,
    }
}

/// What running generations are told when the engine stops.
pub(crate) fn stop_message(reason: FailureKind) -> &'static str {
    match reason {
        FailureKind::Unloaded => "the model was unloaded",
        _ => "the engine is shutting down",
    }
}

/// What the loop asks of a backend.
pub(crate) trait Backend {
    fn shared(&self) -> &Shared;
    fn courier(&mut self) -> &mut Courier;
    /// A submission, a control or a wake-up.
    fn handle(&mut self, command: Command);
    /// Something can run now: a slot that can step, or a queued request and a free slot.
    fn has_runnable_work(&self) -> bool;
    /// Events wait for slow readers.
    fn has_stalled_work(&self) -> bool;
    /// One step (admit, produce tokens, send events). False when nothing was produced.
    fn step(&mut self) -> bool;
    /// While paused: free abandoned work and hand waiting events over.
    fn housekeeping(&mut self);
}

/// The pause after a step of `worked` that makes the engine busy `throttle`% of the time.
pub(crate) fn duty_cycle_pause(worked: Duration, throttle: u8) -> Duration {
    match throttle {
        0 => Duration::ZERO,
        t if t >= 100 => Duration::ZERO,
        t => worked.mul_f64(f64::from(100 - t) / f64::from(t)),
    }
}

/// Serve until shutdown is asked for or every handle is gone.
pub(crate) fn serve(backend: &mut impl Backend, commands: &Receiver<Command>) {
    loop {
        if backend.shared().stop_reason().is_some() {
            backend.courier().deliver();
            return;
        }
        // Throttle 0 pauses decoding: requests wait, controls still work.
        let throttle = backend.shared().throttle.load(Ordering::Acquire).min(100);
        let runnable = throttle > 0 && backend.has_runnable_work();
        if !runnable {
            // No step comes now to hand over what the last one left: it goes before waiting.
            backend.courier().deliver();
        }
        let first = if runnable {
            match commands.try_recv() {
                Ok(c) => Some(c),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            }
        } else if backend.has_stalled_work() {
            match commands.recv_timeout(STALL_POLL) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match commands.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            }
        };
        if let Some(c) = first {
            backend.handle(c);
            while let Ok(c) = commands.try_recv() {
                backend.handle(c);
            }
        }
        if throttle == 0 {
            backend.housekeeping();
            continue;
        }
        let started = Instant::now();
        if backend.step() && throttle < 100 {
            // Below 100 the loop runs a duty cycle: work `throttle`% of the time.
            backend.courier().deliver();
            std::thread::sleep(duty_cycle_pause(started.elapsed(), throttle));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duty_cycle_pauses_in_proportion() {
        let w = Duration::from_millis(30);
        assert_eq!(duty_cycle_pause(w, 100), Duration::ZERO);
        assert_eq!(duty_cycle_pause(w, 75), Duration::from_millis(10));
        assert_eq!(duty_cycle_pause(w, 25), Duration::from_millis(90));
        assert_eq!(duty_cycle_pause(w, 50), w);
    }
}
