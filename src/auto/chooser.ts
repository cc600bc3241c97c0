// The automatic choice between the 'wasm' backend and WebGPU on a software adapter (SwiftShader,
// lavapipe, a fallback adapter), per shape class, the way the tuner chooses kernel variants
// (webgpu/tuning/measure.ts: interleaved rounds, a clear and consistent margin, never on noise).
//
// A class met for the first time runs on 'wasm' (ready at once: no shader to compile), and one
// measurement is queued for it in the background: one WebGPU call (its first kernels compile, its
// final ones and its tuner's sweeps start), WebGPU settled, one untimed 'wasm' call, then ROUNDS
// interleaved timed rounds of both. WebGPU replaces 'wasm' only when it wins clearly; a failure on
// one side chooses the other. Measurements run one at a time, on copies of the first call's inputs.

import type { BackendChoice, BackendChoiceReport } from '../types.ts';
import { decide, interleave, ROUNDS } from '../webgpu/tuning/measure.ts';

export type AutoKind = 'wasm' | 'webgpu';

/** Runs `run` (one call on `backend`) and resolves with its milliseconds. Tests pass a fake one. */
export type Timer = (backend: AutoKind, run: () => Promise<unknown>) => Promise<number>;

export const wallClock: Timer = async (_backend, run) => {
  const t0 = performance.now();
  await run();
  return performance.now() - t0;
};

/** One call of a shape class on either backend (its result is thrown away), and what to release after. */
export interface Trial {
  run(backend: AutoKind): Promise<unknown>;
  dispose?(): void;
}

export class BackendChooser {
  private readonly decided = new Map<string, BackendChoice>();
  private readonly measuring = new Map<string, Promise<void>>();
  /** The measurement before the next one (they run one at a time). */
  private queue: Promise<void> = Promise.resolve();
  private pendingCount = 0;
  private readonly failed: string[] = [];
  /** The backend of the latest call. */
  current: AutoKind = 'wasm';

  constructor(
    /** Why the engine chooses at all (no backend asked for, a software adapter). */
    private readonly why: string,
    /** Resolves when WebGPU's own background work (compiles, sweeps) is done. */
    private readonly gpuSettled: () => Promise<void>,
    private readonly timer: Timer = wallClock,
    private readonly rounds = ROUNDS,
    /**
     * Whether measurements may run in the background (WebGPUBackend.backgroundCompiles): on wgpu a
     * measurement's WebGPU compiles would hold up the calls meanwhile (Deno: the JavaScript thread, so
     * the 'wasm' calls too), so there calls stay on 'wasm' until engine.tune() measures.
     */
    private readonly background: () => boolean = () => true,
  ) {}

  /**
   * The backend a call of `shapeClass` runs now: the measured choice, else 'wasm' (and the class's
   * measurement is queued the first time, with `trial`, made only then).
   */
  choose(shapeClass: string, trial: () => Trial): AutoKind {
    const choice = this.decided.get(shapeClass);
    if (choice) return choice.backend;
    if (this.background()) this.measure(shapeClass, trial);
    return 'wasm';
  }

  /** Queues the class's measurement unless it is measured or queued; resolves when it is done. */
  measure(shapeClass: string, trial: () => Trial): Promise<void> {
    if (this.decided.has(shapeClass)) return Promise.resolve();
    let job = this.measuring.get(shapeClass);
    if (!job) {
      const run = trial();
      this.pendingCount++;
      job = this.queue
        .then(() => this.measureNow(shapeClass, run))
        .catch((e) => {
          this.failed.push(`${shapeClass}: ${(e as Error).message}`);
          this.decided.set(shapeClass, { shapeClass, backend: 'wasm', reason: `the measurement failed (${(e as Error).message}): 'wasm' kept` });
        })
        .finally(() => {
          run.dispose?.();
          this.pendingCount--;
          this.measuring.delete(shapeClass);
        });
      this.queue = job;
      this.measuring.set(shapeClass, job);
    }
    return job;
  }

  /** Resolves when every queued measurement is done. */
  async idle(): Promise<void> {
    while (this.measuring.size > 0) await Promise.all(this.measuring.values());
  }

  report(): BackendChoiceReport {
    const why = this.background()
      ? this.why
      : `${this.why}; nothing is measured in the background here (wgpu compiles on the thread that serves the device, or tuning.background is false): calls stay on 'wasm' until engine.tune() measures their shapes`;
    return { why, current: this.current, choices: [...this.decided.values()], pending: this.pendingCount, failures: [...this.failed] };
  }

  private async measureNow(shapeClass: string, trial: Trial): Promise<void> {
    const gpuError = await failure(() => trial.run('webgpu'));
    if (gpuError) {
      this.decided.set(shapeClass, { shapeClass, backend: 'wasm', reason: `WebGPU failed on this shape (${gpuError}): 'wasm'` });
      return;
    }
    await this.gpuSettled();
    const wasmError = await failure(() => trial.run('wasm'));
    if (wasmError) {
      this.decided.set(shapeClass, { shapeClass, backend: 'webgpu', reason: `'wasm' failed on this shape (${wasmError}): WebGPU` });
      return;
    }
    const samples = await interleave(['wasm', 'webgpu'], (backend) => this.timer(backend as AutoKind, () => trial.run(backend as AutoKind)), this.rounds);
    const d = decide(samples, 'wasm');
    const reason = d.variant === 'webgpu' ? d.reason.replace('the built-in wasm', "'wasm', which answered first") : d.reason.replace('the built-in choice', "'wasm'");
    this.decided.set(shapeClass, { shapeClass, backend: d.variant as AutoKind, timesMs: d.timesMs, spreads: d.spreads, steady: d.steady, reason });
  }
}

async function failure(run: () => Promise<unknown>): Promise<string | null> {
  try {
    await run();
    return null;
  } catch (e) {
    return (e as Error).message;
  }
}

/** Sizes rounded up to a power of two, so that a class holds for nearby shapes (decode steps included). */
export function bucket(n: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, n)));
}
