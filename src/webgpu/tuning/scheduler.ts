// Which kernel variants a call runs now, and the work that makes later calls faster.
//
// A new user's first call must not wait for the compiler. Drivers compile WGSL through LLVM (lavapipe,
// SwiftShader) or a vendor compiler, and the fast variants (written-out tiles, unrolled loops) take
// seconds each; some drivers compile at pipeline creation, lavapipe at the first dispatch. So, as
// JavaScript engines do, a call runs in tiers:
//   - the final choice of each kernel (forced, else remembered by the tuner, else the built-in choice
//     of this adapter kind) where it is compiled and has run once ("warm");
//   - else tier 0 (variants.ts TIER0: the variants that compile fastest), while the final one is
//     compiled (createComputePipelineAsync) and run once on buffers of its own, in the background;
// and a shape class nothing is known about gets a sweep (tuner.ts), in the background too. Background
// tasks run one at a time, each started when no call is under way, and a sweep's every trial too (a
// driver that compiles on its queue still makes a call that comes meanwhile wait); every call's output
// is correct whichever variant it runs. engine.settled() waits for them; engine.warmup() and
// engine.tune() do the same work up front for apps that show a progress bar.
//
// When the queue empties, what the trials allocated goes (the pool's idle scratch), so a settled engine
// holds what its calls need and no more.
//
// With forced variants those run, compiled in line. With `tuning.mode: 'off'` the built-in choice runs,
// compiled in line, and nothing happens in the background (the behaviour of the engine before tiers).
//
// Where the implementation compiles on the thread that serves the device (wgpu: Firefox, Deno), a
// background task cannot yield: a compile, once started, holds up every call that comes before it ends
// (40–130 ms a pipeline on lavapipe with Mesa's cache warm, seconds cold), and under a steady stream
// of calls there is no gap to fit one in. There, unless `tuning.background` says otherwise, nothing runs in the
// background: a call runs its final choice (forced, remembered, else built in: on a CPU adapter tier 0's
// variants, variants.ts inLineChoice, as the built-in ones take a first call 8–16 s to compile cold on
// lavapipe), compiled in line the first time, and sweeps run when the caller asks (engine.tune()), as
// with mode 'off' but for the remembered choices and tune().
//
// The runtime makes the scheduler (runtime.ts), and the scheduler calls nothing above it: what varies
// (the device, its pool, its adapter, whether it was lost or the engine disposed) comes as data, the
// DeviceState of each call; what it runs on a device (the pipelines a variant needs, a timed trial, a
// gate, the trial clock) are the functions of DEVICE_WORK, which the tests replace with stand-ins.

import type { ForwardPlan } from '../../plan/index.ts';
import { compilesInLine, type DeviceAdapter, type DeviceState } from '../device.ts';
import type { KvFormat } from '../kernels/attention-fields.ts';
import { cacheFormat, pipelinesOf } from '../kernels/index.ts';
import { formatsOf, hasPacked, type WeightFormat } from '../kernels/packed-weight.ts';
import { compilePipeline, hasRun, markRun, type PipelineSpec } from '../pipelines.ts';
import { type CallSize, defaultChoice, inLineChoice, type KernelChoice, type KernelName, kernelsOf, TIER0 } from '../variants.ts';
import { gateVariant } from './gate.ts';
import type { TrialClock } from './measure.ts';
import { timeKernel, trialClock } from './trial.ts';
import { type ResolvedTuning, shapeClass, Tuner } from './tuner.ts';

/** What the scheduler runs on a device: the functions it calls, given at construction (DEVICE_WORK; the tests pass stand-ins). */
export interface DeviceWork {
  /** The pipelines a kernel variant needs for this plan (several where its dispatches differ: q, k, v weights of different types). */
  pipelinesOf(state: DeviceState, plan: ForwardPlan, kernel: KernelName, variant: string): readonly PipelineSpec[];
  /** Runs `kernel` as `variant`, `repeat` times, alone, on buffers shaped like the plan's; milliseconds (trial.ts timeKernel). */
  time(state: DeviceState, plan: ForwardPlan, kernel: KernelName, variant: string, repeat?: number): Promise<number>;
  /** Null when the variant matches the float64 reference on a small layer (gate.ts gateVariant); else why not. */
  gate(state: DeviceState, kernel: KernelName, variant: string, headDim: number, format?: WeightFormat | null, kvFormat?: KvFormat): Promise<string | null>;
  /** How `time` measures on this device (trial.ts trialClock). */
  clock(state: DeviceState): TrialClock;
  /** The WebGPU implementation when it compiles on the thread that serves the device (device.ts compilesInLine), else null. */
  compilesInLine(): string | null;
}

/** The real device work: kernels/index.ts, trial.ts, gate.ts, device.ts. */
export const DEVICE_WORK: DeviceWork = {
  pipelinesOf: (state, plan, kernel, variant) => pipelinesOf(state.device, state.pool.precision, plan, kernel, variant),
  time: (state, plan, kernel, variant, repeat) => timeKernel(state.pool, plan, kernel, variant, repeat),
  gate: (state, kernel, variant, headDim, format, kvFormat) => gateVariant(state.pool, state.adapter.kind, kernel, variant, headDim, format, kvFormat),
  clock: (state) => trialClock(state.device),
  compilesInLine,
};

/** The sizes of a call that decide a built-in choice: its longest sequences of query rows and of keys (a packed batch's are its longest sequence). */
export function callSize(plan: ForwardPlan): CallSize {
  const queryRows = plan.geometry.longestSequence;
  const { batches, qRows, kvRows } = plan.geometry;
  const rows = plan.mode === 'cross' && !plan.cache ? Math.max(batches * qRows, batches * kvRows) : batches * qRows;
  return { queryRows, keys: plan.mode === 'varlen' ? queryRows : plan.kvSeqLen, rows, packed: hasPacked(formatsOf(plan.layer)) };
}

export type Progress = (p: { done: number; total: number; kernel: string; variant: string }) => void;

export class KernelScheduler {
  private chain: Promise<void> = Promise.resolve();
  private queued = 0;
  private readonly warming = new Set<string>();
  /** Sweeps queued (by kernel and class), so that a class is swept once however many calls meet it first. */
  private readonly sweeping = new Set<string>();
  /** Compiled ahead of use: what, and how long compiling and one run took. */
  readonly compiled: { kernel: string; variant: string; ms: number }[] = [];
  readonly failures: string[] = [];
  /** Calls under way: background work starts only between calls. */
  private inFlight = 0;
  private idleWaiters: (() => void)[] = [];
  /** What is known of kernel variants per adapter and shape class, and the sweeps. */
  readonly tuner: Tuner;

  constructor(
    tuning: ResolvedTuning,
    private readonly work: DeviceWork = DEVICE_WORK,
  ) {
    this.tuner = new Tuner(tuning);
  }

  /** A call has begun: background tasks start only when no call is under way (each begin() is followed by one end()). */
  begin(): void {
    this.inFlight++;
  }

  /** A call has ended (resolved or rejected). */
  end(): void {
    if (--this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  private idle(): Promise<void> {
    return this.inFlight === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Background tasks queued or running. */
  get pending(): number {
    return this.queued;
  }

  /** Whether background compiles are wanted at all, whatever the mode: tuning.background, else not on an implementation that compiles in line. */
  backgroundCompiles(): boolean {
    const { background } = this.tuner.options;
    return background ?? !this.work.compilesInLine();
  }

  /** Whether compiles and sweeps run in the background (mode 'auto'), and why (engine.tuning.background). */
  background(): { enabled: boolean; why: string } {
    const { mode, background } = this.tuner.options;
    if (mode === 'off') return { enabled: false, why: "tuning.mode 'off': the built-in choice, compiled in line" };
    const enabled = this.backgroundCompiles();
    if (background != null) {
      return { enabled, why: enabled ? 'tuning.background: true' : 'tuning.background: false: final kernels compiled in line, sweeps only in engine.tune()' };
    }
    if (!enabled) {
      return {
        enabled,
        why:
          `${this.work.compilesInLine()} compiles a pipeline on the thread that serves the device, so a background compile would hold up ` +
          'the calls that come meanwhile: final kernels (on a CPU adapter, the ones that compile fastest) are compiled in line by ' +
          'the first call of a shape, and sweeps run only in engine.tune() (tuning.background: true sweeps in the background anyway)',
      };
    }
    return { enabled: true, why: 'compiles and sweeps run in the background, between calls' };
  }

  /**
   * What a kernel runs where nothing is forced or remembered: the adapter kind's built-in choice, or,
   * where final kernels compile in line (mode 'auto', no background work), variants.ts inLineChoice.
   */
  builtIn(adapter: DeviceAdapter, size?: CallSize): KernelChoice {
    const { kind, subgroups } = adapter;
    if (this.tuner.options.mode === 'off' || this.backgroundCompiles()) return defaultChoice(kind, subgroups, size);
    return inLineChoice(kind, subgroups, size, adapter.software);
  }

  /** The final choice of each kernel for this plan: forced, remembered, or built in (compiled in line: inLineChoice). */
  finalChoice(plan: ForwardPlan, state: DeviceState, kernels: readonly KernelName[]): KernelChoice {
    const { forced, mode } = this.tuner.options;
    const builtIn = this.builtIn(state.adapter, callSize(plan));
    const choice: KernelChoice = { ...builtIn, ...forced };
    if (mode === 'off') return choice;
    for (const kernel of kernels) {
      if (forced[kernel]) continue;
      const known = this.tuner.known(state.adapter, kernel, shapeClass(kernel, plan, state.pool.precision));
      if (known) (choice as Record<KernelName, string>)[kernel] = known.variant;
    }
    return choice;
  }

  /** The variants a call of `plan` runs now (see the top of this file); schedules what makes later calls faster. */
  async choose(state: DeviceState, plan: ForwardPlan, all: readonly KernelName[]): Promise<KernelChoice> {
    const kernels = kernelsOf(plan, all);
    const { mode, forced } = this.tuner.options;
    if (mode === 'off') return this.finalChoice(plan, state, kernels);
    await this.tuner.load();
    // Nothing in the background (see the top of this file): the final choice, compiled in line.
    if (!this.backgroundCompiles()) return this.finalChoice(plan, state, kernels);
    const target = this.finalChoice(plan, state, kernels);
    const now: KernelChoice = { ...target };
    const free = kernels.filter((kernel) => !forced[kernel]);
    for (const kernel of free) {
      if (this.specs(state, plan, kernel, target[kernel]).every((spec) => hasRun(state.device, spec))) continue;
      (now as Record<KernelName, string>)[kernel] = TIER0[kernel];
      this.warm(state, plan, kernel, target[kernel]);
    }
    // Then, after the final kernels compiled, a sweep of each class nothing is known about.
    for (const kernel of free) this.scheduleSweep(state, plan, kernel);
    // What this call runs compiles in line and has run once when the call is done.
    for (const kernel of kernels) for (const spec of this.specs(state, plan, kernel, now[kernel])) markRun(state.device, spec);
    return now;
  }

  /** Resolves when the background work queued so far, and any it queued in turn, is done. */
  async settled(): Promise<void> {
    while (this.queued > 0) await this.chain;
  }

  /** Compiles (and runs once) the final kernels of each plan, now; progress per kernel. */
  async warmup(state: DeviceState, plans: readonly ForwardPlan[], kernels: readonly KernelName[], onProgress?: Progress): Promise<void> {
    await this.tuner.load();
    const work: { plan: ForwardPlan; kernel: KernelName; variant: string }[] = [];
    for (const plan of plans) {
      const target = this.finalChoice(plan, state, kernels);
      for (const kernel of kernelsOf(plan, kernels)) work.push({ plan, kernel, variant: target[kernel] });
    }
    let done = 0;
    for (const { plan, kernel, variant } of work) {
      await this.warm(state, plan, kernel, variant);
      onProgress?.({ done: ++done, total: work.length, kernel, variant });
    }
  }

  /** Sweeps each kernel of each plan now (those not forced, and not known already); progress per kernel. */
  async tune(state: DeviceState, plans: readonly ForwardPlan[], kernels: readonly KernelName[], onProgress?: Progress): Promise<void> {
    await this.tuner.load();
    const { forced } = this.tuner.options;
    const work = plans.flatMap((plan) =>
      kernelsOf(plan, kernels)
        .filter((k) => !forced[k])
        .map((kernel) => ({ plan, kernel })),
    );
    let done = 0;
    for (const { plan, kernel } of work) {
      await this.scheduleSweep(state, plan, kernel);
      onProgress?.({ done: ++done, total: work.length, kernel, variant: this.finalChoice(plan, state, [kernel])[kernel] });
    }
  }

  /** Compiles `variant` of `kernel` for this plan and runs it once, in the background queue; resolves when done. */
  private warm(state: DeviceState, plan: ForwardPlan, kernel: KernelName, variant: string): Promise<void> {
    const specs = this.specs(state, plan, kernel, variant);
    const ran = () => specs.every((spec) => hasRun(state.device, spec));
    const key = `${state.generation}|${specs.map((spec) => spec.key).join('+')}`;
    if (ran() || this.warming.has(key)) return this.chain;
    this.warming.add(key);
    return this.enqueue(`compile ${kernel} ${variant}`, state, async () => {
      if (ran()) return;
      const t0 = performance.now();
      for (const spec of specs) await compilePipeline(state.device, spec);
      if (state.retired) return;
      await this.work.time(state, plan, kernel, variant); // drivers that compile at the first dispatch do it here
      for (const spec of specs) markRun(state.device, spec);
      this.compiled.push({ kernel, variant, ms: Math.round(performance.now() - t0) });
    }).finally(() => this.warming.delete(key));
  }

  /** Queues a sweep of this kernel's shape class unless one is known, queued or under way; resolves when it is done. */
  private scheduleSweep(state: DeviceState, plan: ForwardPlan, kernel: KernelName): Promise<void> {
    const cls = shapeClass(kernel, plan, state.pool.precision);
    const key = `${kernel}|${cls}`;
    if (this.tuner.started(state.adapter, kernel, cls) || this.sweeping.has(key)) return this.chain;
    this.sweeping.add(key);
    return this.enqueue(`sweep ${kernel} ${cls}`, state, () => this.sweep(state, plan, kernel, cls));
  }

  private async sweep(state: DeviceState, plan: ForwardPlan, kernel: KernelName, cls: string): Promise<void> {
    if (state.retired) return;
    const call = callSize(plan);
    await this.tuner.sweep(state.adapter, kernel, cls, plan.layer.headDim, state.pool.precision, {
      call,
      formats: formatsOf(plan.layer),
      kvFormat: cacheFormat(plan, state.pool.precision),
      clock: this.work.clock(state),
      idle: () => this.idle(),
      gate: (k, variant, headDim, format, kvFormat) => this.work.gate(state, k, variant, headDim, format, kvFormat),
      // Each trial waits until no call is under way: a call that arrives during a sweep waits for the
      // one trial on the GPU at most, not for the rest of the sweep.
      time: async (k, variant, repeat) => {
        await this.idle();
        if (state.retired) throw new Error('the device changed or the engine was disposed');
        return this.work.time(state, plan, k, variant, repeat);
      },
    });
    // Every candidate the sweep timed has compiled and run: a switch to the winner costs nothing.
    for (const variant of this.tuner.candidatesOf(state.adapter, kernel, call)) {
      if (!state.retired) for (const spec of this.specs(state, plan, kernel, variant)) markRun(state.device, spec);
    }
  }

  /** The pipelines `variant` of `kernel` needs for this plan, as a list. */
  private specs(state: DeviceState, plan: ForwardPlan, kernel: KernelName, variant: string): readonly PipelineSpec[] {
    return this.work.pipelinesOf(state, plan, kernel, variant);
  }

  /**
   * Queues a background task on `state` after the others; resolves when it is done (its failure is
   * recorded, not thrown). A task whose device was lost (or engine disposed) by its turn is dropped.
   */
  private enqueue(what: string, state: DeviceState, task: () => Promise<void>): Promise<void> {
    this.queued++;
    const run = this.chain.then(async () => {
      try {
        await this.idle();
        if (!state.retired) await task();
      } catch (e) {
        this.failures.push(`${what}: ${(e as Error).message}`);
      } finally {
        // The queue is empty: the trials' and gates' buffers sit idle in the pool, and go (the next
        // call takes its own scratch again, once).
        if (--this.queued === 0 && !state.retired) state.pool.trim();
      }
    });
    this.chain = run;
    return run;
  }
}
