// Choosing kernel variants per adapter and shape class: a short sweep on first use, remembered.
//
// For each kernel a forward runs (qkv_projection, flash_attention, output_projection) and each shape
// class (sizes bucketed by powers of 4, see shapeClass), the first call on an adapter:
//   1. gates every variant: it runs a small layer with that variant and compares the output with the
//      float64 CPU reference; a variant that fails is never timed or used (a driver bug on one adapter
//      costs speed, never correctness);
//   2. times the variants that passed, each kernel alone on buffers of the call's shape that belong to
//      the trial (trial.ts) over the first TRIAL_ROWS rows, the better of two runs, wall time to
//      onSubmittedWorkDone; a variant 1.5× slower than the best so far after one run is not run again;
//   3. keeps the fastest for this adapter and class, in memory and in the store (localStorage in a
//      browser, a JSON file in Node), so later engines on the same adapter skip the sweep.
// The choice is made before a call encodes anything (backend.ts), so a sweep never runs inside a call.
// The caller can force variants (`tuning.kernels`), turn sweeping off (`tuning.mode: 'off'`: the
// built-in choice for the adapter kind), and choose or disable the store (`tuning.store`).

import type { ForwardPlan } from '../../plan/index.ts';
import type { TuningChoice, TuningStore } from '../../types.ts';
import type { Precision } from '../buffers.ts';
import { defaultChoice, type KernelChoice, type KernelName, VARIANTS } from '../variants.ts';

/** Bump when variants or what they compute change: remembered choices from before are ignored. */
export const TUNING_VERSION = 2;

export interface ResolvedTuning {
  mode: 'auto' | 'off';
  forced: Partial<KernelChoice>;
  store: TuningStore | null;
}

/** What a forward offers the tuner: its kernels, runnable alone on the call's buffers. */
export interface Trial {
  /** Runs `kernel` alone as `variant`; resolves when the GPU is done, with wall milliseconds. */
  time(kernel: KernelName, variant: string): Promise<number>;
}

/** Null when `variant` of `kernel` matches the float64 reference on a small layer of this head size; else why not. */
export type Gate = (kernel: KernelName, variant: string, headDim: number) => Promise<string | null>;

/** Picks each kernel's variant for a forward. */
export interface KernelChooser {
  choose(plan: ForwardPlan, precision: Precision, kernels: readonly KernelName[], trial: Trial): Promise<KernelChoice>;
}

/** Powers of 4: 1…4, …16, …64, …256, …1024, …4096, then "large". Few classes, so few sweeps. */
function bucket(n: number): string {
  for (let b = 4; b <= 4096; b *= 4) if (n <= b) return String(b);
  return 'large';
}

/** The shape class of `kernel` in this call: the sizes that decide which variant is fastest, bucketed. */
export function shapeClass(kernel: KernelName, plan: ForwardPlan, precision: Precision): string {
  const { batches, qRows, kvRows, longestSequence } = plan.geometry;
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E } = plan.layer;
  switch (kernel) {
    case 'qkv_projection':
      return `${precision} m${bucket(batches * qRows)} k${bucket(E)} n${bucket((H + 2 * G) * Dh)}`;
    case 'output_projection':
      return `${precision} m${bucket(batches * qRows)} k${bucket(E)} n${bucket(E)}`;
    case 'flash_attention':
      return `${precision} dh${Dh} bh${bucket(batches * H)} q${bucket(longestSequence)} kv${bucket(kvRows)}${plan.isCausal ? ' causal' : ''}`;
  }
}

const TIMED_RUNS = 2;
/** A variant this much slower than the best so far after one timed run is not run again. */
const HOPELESS = 1.5;

export class Tuner implements KernelChooser {
  private readonly memory = new Map<string, TuningChoice>();
  /** Keys of the entries this engine's calls have used (swept, or loaded from the store and used). */
  private readonly used = new Set<string>();
  private readonly pending = new Map<string, Promise<TuningChoice>>();
  private loaded: Promise<void> | null = null;
  /** Gate verdicts, per adapter, precision, head size and variant. */
  private readonly gates = new Map<string, Promise<string | null>>();

  constructor(
    readonly options: ResolvedTuning,
    /** Identifies the adapter: choices are remembered per adapter. */
    private readonly adapterKey: () => string,
    private readonly cpuAdapter: () => boolean,
    private readonly gate: Gate,
  ) {}

  /** The choices this engine's calls have used so far (on its current adapter), in order of first use. */
  entries(): TuningChoice[] {
    const prefix = `${this.adapterKey()}|`;
    return [...this.used].filter((key) => key.startsWith(prefix)).map((key) => this.memory.get(key)!);
  }

  async choose(plan: ForwardPlan, precision: Precision, kernels: readonly KernelName[], trial: Trial): Promise<KernelChoice> {
    const choice = { ...defaultChoice(this.cpuAdapter()), ...this.options.forced };
    if (this.options.mode === 'off') return choice;
    await this.load();
    for (const kernel of kernels) {
      if (this.options.forced[kernel]) continue;
      const entry = await this.entryFor(kernel, shapeClass(kernel, plan, precision), plan.layer.headDim, precision, trial);
      (choice as Record<KernelName, string>)[kernel] = entry.variant;
    }
    return choice;
  }

  private load(): Promise<void> {
    this.loaded ??= (async () => {
      const records = await this.options.store?.load().catch(() => null);
      for (const [key, entry] of Object.entries(records ?? {})) {
        const [version] = key.split('|', 1);
        const variants = (entry && VARIANTS[entry.kernel]) as readonly string[] | undefined;
        if (version === `v${TUNING_VERSION}` && variants?.includes(entry.variant)) {
          this.memory.set(key.slice(version.length + 1), { ...entry, source: 'store' });
        }
      }
    })();
    return this.loaded;
  }

  private entryFor(kernel: KernelName, cls: string, headDim: number, precision: Precision, trial: Trial): Promise<TuningChoice> {
    const key = `${this.adapterKey()}|${kernel}|${cls}`;
    const known = this.memory.get(key);
    if (known) {
      this.used.add(key);
      return Promise.resolve(known);
    }
    let sweep = this.pending.get(key);
    if (!sweep) {
      sweep = this.sweep(kernel, cls, headDim, precision, trial).then(async (entry) => {
        this.memory.set(key, entry);
        this.used.add(key);
        await this.save();
        return entry;
      });
      sweep.finally(() => this.pending.delete(key)).catch(() => {});
      this.pending.set(key, sweep);
    }
    return sweep;
  }

  private async sweep(kernel: KernelName, cls: string, headDim: number, precision: Precision, trial: Trial): Promise<TuningChoice> {
    const refused: Record<string, string> = {};
    const passed: string[] = [];
    for (const variant of VARIANTS[kernel]) {
      const gateKey = `${this.adapterKey()}|${precision}|dh${headDim}|${kernel}|${variant}`;
      let verdict = this.gates.get(gateKey);
      if (!verdict) {
        verdict = this.gate(kernel, variant, headDim).catch((e) => `failed to run: ${(e as Error).message}`);
        this.gates.set(gateKey, verdict);
      }
      const why = await verdict;
      if (why) refused[variant] = why;
      else passed.push(variant);
    }
    const fallback = defaultChoice(this.cpuAdapter())[kernel];
    if (passed.length === 0) {
      // Every variant failed the gate: keep the built-in choice and say so (the tests of this
      // engine are what vouch for it; the forward itself still runs).
      return { kernel, shapeClass: cls, variant: fallback, source: 'sweep', refused };
    }
    const timesMs: Record<string, number> = {};
    let best = Infinity;
    for (const variant of passed) {
      let fastest = Infinity;
      for (let run = 0; run < TIMED_RUNS; run++) {
        fastest = Math.min(fastest, await trial.time(kernel, variant));
        if (fastest > HOPELESS * best) break;
      }
      timesMs[variant] = Math.round(fastest * 1000) / 1000;
      best = Math.min(best, fastest);
    }
    const variant = passed.reduce((a, b) => (timesMs[b] < timesMs[a] ? b : a));
    return { kernel, shapeClass: cls, variant, source: 'sweep', timesMs, ...(Object.keys(refused).length ? { refused } : {}) };
  }

  private async save(): Promise<void> {
    const store = this.options.store;
    if (!store) return;
    // Merge with what is there now: another engine (or process) may have saved since this one loaded.
    const records: Record<string, TuningChoice> = {};
    for (const [key, entry] of Object.entries((await store.load().catch(() => null)) ?? {})) {
      if (key.startsWith(`v${TUNING_VERSION}|`)) records[key] = entry;
    }
    for (const [key, entry] of this.memory) records[`v${TUNING_VERSION}|${key}`] = { ...entry, source: 'sweep' };
    await store.save(records).catch(() => {}); // a read-only disk or full storage costs the memory, nothing else
  }
}
