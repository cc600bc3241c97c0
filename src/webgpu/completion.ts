// Waiting for the GPU without waiting for a timer.
//
// Some WebGPU implementations notice finished GPU work only on a timer: Firefox polls its wgpu device
// every 100 ms (Mozilla bug 1870699, POLL_TIME_MS in WebGPUParent.cpp), so a mapAsync or
// onSubmittedWorkDone resolves up to 100 ms after the work is done, and every forward cost ≥ 100 ms
// there (measured: a trivial dispatch and a 4-byte readback, 100 ms median). An empty `queue.submit([])`
// makes it poll at once (jax-js and donner do the same; measured here: 101 ms → 9 ms). So while a wait
// is pending, `waitFor` submits nothing a few times: soon after the wait starts, then at growing
// intervals (at most NUDGE_MAX_INTERVAL_MS apart), for at most NUDGE_BUDGET_MS, after which the
// implementation's own timer takes over.
//
// Only where it helps: each device's completion is probed once (`probeCompletion`: how long
// onSubmittedWorkDone takes with nothing to do, twice in a row), when the engine is created. Where the
// answer is fast (Dawn: Chromium, Node; well under 1 ms) nothing is nudged; where it is slow (a timer)
// or not known yet, waits are nudged, except while the probe measures: a nudge would make it fast, so
// nudges hold off for its few milliseconds (Firefox: up to two of its 100 ms ticks, once per device). An
// empty submit is valid WebGPU everywhere and costs little.

/** A probe slower than this means completion is timer-driven (Firefox: ~100 ms; Dawn: < 1 ms). */
export const TIMER_DRIVEN_MS = 20;
/** Nudges stop after this long: the implementation's timer answers soon after. */
export const NUDGE_BUDGET_MS = 2000;
/** The longest gap between two nudges. */
export const NUDGE_MAX_INTERVAL_MS = 8;

interface Completion {
  /** Whether waits on this device are nudged (true until the probe says otherwise). */
  nudge: boolean;
  /** The probe's round trip, ms (null until it has answered). */
  probeMs: number | null;
  probe: Promise<void> | null;
  /** While the probe measures, waits hold their nudges. */
  probing: boolean;
}

const completions = new WeakMap<GPUDevice, Completion>();

function completionOf(device: GPUDevice): Completion {
  let c = completions.get(device);
  if (!c) {
    c = { nudge: true, probeMs: null, probe: null, probing: false };
    completions.set(device, c);
  }
  return c;
}

/**
 * Measures once per device how long an empty onSubmittedWorkDone takes (no nudges meanwhile), and
 * decides from it whether waits are nudged. createAttentionEngine awaits it before it returns, when
 * nothing of the engine's is queued yet (work on the queue would make any implementation slow); a
 * device that replaces a lost one is probed in the background. Resolves when known; never rejects.
 */
export function probeCompletion(device: GPUDevice): Promise<void> {
  const c = completionOf(device);
  c.probe ??= (async () => {
    c.probing = true;
    try {
      // Twice in a row: a periodic timer may tick just after the first wait starts; the second starts
      // on a tick and waits a whole period.
      let ms = 0;
      for (let i = 0; i < 2; i++) {
        const t0 = performance.now();
        await device.queue.onSubmittedWorkDone();
        ms = Math.max(ms, performance.now() - t0);
      }
      c.probeMs = ms;
      c.nudge = ms >= TIMER_DRIVEN_MS;
    } catch {
      // A lost device: nothing to wait for on it any more.
    } finally {
      c.probing = false;
    }
  })();
  return c.probe;
}

/** What the probe found: the round trip of an empty wait (ms, null until measured) and whether waits are nudged. */
export function completionInfo(device: GPUDevice): { probeMs: number | null; timerDriven: boolean | null; nudged: boolean } {
  const c = completionOf(device);
  return { probeMs: c.probeMs, timerDriven: c.probeMs === null ? null : c.probeMs >= TIMER_DRIVEN_MS, nudged: c.nudge };
}

/**
 * `pending` (a mapAsync or onSubmittedWorkDone of `device`), nudged where completion is timer-driven:
 * empty submits while it is pending, bounded in number and time. Settles as `pending` does.
 */
export function waitFor<T>(device: GPUDevice, pending: Promise<T>): Promise<T> {
  const c = completionOf(device);
  if (!c.nudge) return pending;
  let done = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const started = performance.now();
  let interval = 1;
  const nudge = () => {
    timer = null;
    if (done || !c.nudge || performance.now() - started > NUDGE_BUDGET_MS) return;
    if (!c.probing) {
      try {
        device.queue.submit([]);
      } catch {
        return; // a destroyed device: its waits reject on their own
      }
    }
    interval = Math.min(NUDGE_MAX_INTERVAL_MS, interval * 2);
    timer = setTimeout(nudge, interval);
  };
  timer = setTimeout(nudge, interval);
  const stop = () => {
    done = true;
    if (timer !== null) clearTimeout(timer);
  };
  pending.then(stop, stop);
  return pending;
}
