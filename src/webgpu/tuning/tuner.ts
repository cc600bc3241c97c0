// What the engine knows about kernel variants on an adapter, per kernel and shape class: choices
// measured by a sweep (now, or by an earlier engine: the store), and the sweep itself.
//
// A sweep of one kernel for one shape class (sizes bucketed by powers of 4, see shapeClass):
//   1. gates each candidate (variants.ts candidates: those that can win on this adapter kind) on a
//      small layer against the float64 reference (gate.ts); a variant that fails is never timed or
//      used (a driver bug on one adapter costs speed, never correctness);
//   2. runs each once untimed (the driver's compile), then times them interleaved, round after round,
//      alone on buffers of the call's shape that belong to the trial (trial.ts);
//   3. decides by measure.ts: the built-in choice stays unless another beats it clearly and
//      consistently; a noisy measurement decides nothing and is not remembered;
//   4. remembers a steady decision in memory and in the store (localStorage in a browser, a JSON file
//      in Node), keyed by version, adapter, kernel and class, so later engines skip the sweep.
// Sweeps never run inside a call: the scheduler (scheduler.ts) runs them in the background, or when
// the caller asks (engine.tune). The caller can force variants (`tuning.kernels`), turn sweeping off
// (`tuning.mode: 'off'`: the built-in choice), and choose or disable the store (`tuning.store`).
//
// The tuner holds no device and reaches nothing above it: each method is told the adapter it is about
// (TuningAdapter, data from the device's state), and a sweep's work on the device (the gate, the timed
// runs) comes in its Trial, which the scheduler makes for that sweep.

import type { ForwardPlan } from '../../plan/index.ts';
import type { TuningChoice, TuningStore } from '../../types.ts';
import type { Precision } from '../buffers.ts';
import type { DeviceAdapter } from '../device.ts';
import { type CallSize, candidates, defaultChoice, type KernelChoice, type KernelName, VARIANTS } from '../variants.ts';
import { distinctFormats, formatClass, formatKey, formatsOf, type ProjectionFormats, type WeightFormat } from '../kernels/packed-weight.ts';
import type { KvFormat } from '../kernels/attention-fields.ts';
import { cacheFormat } from '../kernels/index.ts';
import { decide, interleave, type TrialClock } from './measure.ts';

/** Bump when variants, what they compute or how they are chosen change: remembered choices from before are ignored. */
export const TUNING_VERSION = 10; // 10: trials timed by timestamp queries where the device has them; 9: workgroup-128 GEMM on GPUs; 8: long causal calls timed on their middle rows; GEMM row blocks; short calls 2-row

export interface ResolvedTuning {
  mode: 'auto' | 'off';
  /** tuning.background; null: the implementation's default (scheduler.ts backgroundCompiles). */
  background?: boolean | null;
  forced: Partial<KernelChoice>;
  store: TuningStore | null;
}

/**
 * The adapter choices are made for (device.ts DeviceAdapter, data): they are remembered under its key;
 * its kind and the device's subgroups feature decide the candidates and the built-in choice.
 */
export type TuningAdapter = Pick<DeviceAdapter, 'key' | 'kind' | 'subgroups'>;

/** What a sweep may run on the device (the scheduler makes one per sweep: tuning/scheduler.ts): the gate, and one kernel variant alone, timed. */
export interface Trial {
  /** Null when `variant` of `kernel` matches the float64 reference on a small layer of this head size (gate.ts); else why not. */
  gate: Gate;
  /** Runs `kernel` alone as `variant`, `repeat` times in one submission; resolves when the GPU is done, with wall milliseconds. */
  time(kernel: KernelName, variant: string, repeat?: number): Promise<number>;
  /** The call's longest sequences of query rows and keys: they can decide the built-in choice (defaultChoice). */
  call?: CallSize;
  /** The layer's weight formats (packed-weight.ts): a projection variant is gated on each format its kernel reads. */
  formats?: ProjectionFormats;
  /** How the call's KV cache keeps K and V where not as the engine's tensors (attention-fields.ts KvFormat): an attention variant is gated reading such a cache. */
  kvFormat?: KvFormat;
  /** How `time` measures (trial.ts trialClock); without it, nothing is known of the clock's step. */
  clock?: TrialClock;
  /** Resolves when no call is under way: each gate waits for it, as each timed run does. */
  idle?: () => Promise<void>;
}

/** Each timed sample lasts at least about this long (short kernels run several times per sample): timer and submission noise stay small beside it. */
const SAMPLE_MS = 8;
const MAX_REPEAT = 32;

/** Null when `variant` of `kernel` matches the float64 reference on a small layer of this head size; else why not. */
export type Gate = (kernel: KernelName, variant: string, headDim: number, format?: WeightFormat | null, kvFormat?: KvFormat) => Promise<string | null>;

/** A shape class's mark for a KV cache kept as another type (its variants read K and V through that format's loader). */
function kvClass(format: KvFormat | undefined): string {
  return format ? ` kv:${format}` : '';
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
      return `${precision} m${bucket(batches * qRows)} k${bucket(E)} n${bucket((H + 2 * G) * Dh)}${formatClass(formatsOf(plan.layer).qkv)}`;
    case 'output_projection':
      return `${precision} m${bucket(batches * qRows)} k${bucket(H * Dh)} n${bucket(E)}${formatClass([formatsOf(plan.layer).out])}`; // K = H·Dh
    case 'flash_attention':
      return `${precision} dh${Dh} bh${bucket(batches * H)} q${bucket(longestSequence)} kv${bucket(kvRows)}${plan.isCausal ? ' causal' : ''}${kvClass(cacheFormat(plan, precision))}`;
  }
}

export class Tuner {
  private readonly memory = new Map<string, TuningChoice>();
  /** Keys of the entries this engine's calls have used (swept, or loaded from the store and used). */
  private readonly used = new Set<string>();
  private readonly sweeps = new Map<string, Promise<TuningChoice>>();
  private loaded: Promise<void> | null = null;
  /** Gate verdicts, per adapter, precision, head size and variant. */
  private readonly gates = new Map<string, Promise<string | null>>();

  constructor(readonly options: ResolvedTuning) {}

  /** The choices this engine's calls have used so far on `adapter` (the current one), in order of first use. */
  entries(adapter: Pick<TuningAdapter, 'key'>): TuningChoice[] {
    const prefix = `${adapter.key}|`;
    return [...this.used].filter((key) => key.startsWith(prefix)).map((key) => this.memory.get(key)!);
  }

  /** Reads the store once (a store written by another version, or naming an unknown variant, is ignored). */
  load(): Promise<void> {
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

  /** The remembered choice of `kernel` for this class, if any (call load() first); marks it used. */
  known(adapter: TuningAdapter, kernel: KernelName, cls: string): TuningChoice | undefined {
    const key = `${adapter.key}|${kernel}|${cls}`;
    const entry = this.memory.get(key);
    if (entry) this.used.add(key);
    return entry;
  }

  /** Whether a sweep of this kernel and class has been started (or is known). */
  started(adapter: TuningAdapter, kernel: KernelName, cls: string): boolean {
    const key = `${adapter.key}|${kernel}|${cls}`;
    return this.memory.has(key) || this.sweeps.has(key);
  }

  /** Sweeps `kernel` for this class, once however often asked; resolves with the choice (also remembered). */
  sweep(adapter: TuningAdapter, kernel: KernelName, cls: string, headDim: number, precision: Precision, trial: Trial): Promise<TuningChoice> {
    const key = `${adapter.key}|${kernel}|${cls}`;
    const known = this.memory.get(key);
    if (known) return Promise.resolve(known);
    let sweep = this.sweeps.get(key);
    if (!sweep) {
      sweep = this.measure(adapter, kernel, cls, headDim, precision, trial).then(async (entry) => {
        this.used.add(key);
        this.memory.set(key, entry);
        // A noisy measurement decided nothing (the built-in choice runs): save() leaves it out, so the
        // next engine measures again.
        await this.save();
        return entry;
      });
      this.sweeps.set(key, sweep);
    }
    return sweep;
  }

  /** The variants a sweep of `kernel` compiles: the candidates of this adapter kind, and the built-in choice (for calls of this size). */
  candidatesOf(adapter: TuningAdapter, kernel: KernelName, call?: CallSize): string[] {
    const builtIn = defaultChoice(adapter.kind, adapter.subgroups, call)[kernel];
    const list = candidates(adapter.kind, kernel, adapter.subgroups) as readonly string[];
    return list.includes(builtIn) ? [...list] : [builtIn, ...list];
  }

  private async measure(adapter: TuningAdapter, kernel: KernelName, cls: string, headDim: number, precision: Precision, trial: Trial): Promise<TuningChoice> {
    const { call } = trial;
    const refused: Record<string, string> = {};
    const passed: string[] = [];
    const f = trial.formats;
    const formats = kernel === 'flash_attention' || !f ? [null] : distinctFormats(kernel === 'qkv_projection' ? f.qkv : [f.out]);
    for (const variant of this.candidatesOf(adapter, kernel, call)) {
      let why: string | null = null;
      for (const format of formats) {
        const kvFormat = kernel === 'flash_attention' ? trial.kvFormat : undefined;
        const gateKey = `${adapter.key}|${precision}|dh${headDim}|${kernel}|${variant}${formatKey(format)}${kvClass(kvFormat)}`;
        let verdict = this.gates.get(gateKey);
        if (!verdict) {
          await trial.idle?.();
          const gated = kvFormat
            ? trial.gate(kernel, variant, headDim, null, kvFormat)
            : format
              ? trial.gate(kernel, variant, headDim, format)
              : trial.gate(kernel, variant, headDim);
          verdict = gated.catch((e) => `failed to run: ${(e as Error).message}`);
          this.gates.set(gateKey, verdict);
        }
        why ??= await verdict;
      }
      if (why) refused[variant] = why;
      else passed.push(variant);
    }
    const builtIn = defaultChoice(adapter.kind, adapter.subgroups, call)[kernel];
    const base = { kernel, shapeClass: cls, source: 'sweep' as const, ...(Object.keys(refused).length ? { refused } : {}) };
    if (passed.length === 0) {
      // Every variant failed the gate: keep the built-in choice and say so (the tests of this
      // engine are what vouch for it; the forward itself still runs).
      return { ...base, variant: builtIn, note: 'every candidate failed the correctness gate: kept the built-in choice' };
    }
    // One untimed run each first: it pays for the driver's compile (some drivers compile at the first
    // dispatch), so it is reported, not counted.
    const firstRunMs: Record<string, number> = {};
    for (const variant of passed) firstRunMs[variant] = Math.round(await trial.time(kernel, variant));
    // How many runs make one sample (the same for every candidate, from the built-in one's second run).
    const once = await trial.time(kernel, passed.includes(builtIn) ? builtIn : passed[0]);
    const repeat = Math.max(1, Math.min(MAX_REPEAT, Math.ceil(SAMPLE_MS / Math.max(once, 0.01))));
    // A sample is one run's share of `repeat`: so is the clock's step.
    const clock = trial.clock ? { ...trial.clock, stepMs: trial.clock.stepMs / repeat } : undefined;
    const decision = decide(await interleave(passed, async (variant) => (await trial.time(kernel, variant, repeat)) / repeat), builtIn, clock);
    return {
      ...base,
      variant: decision.variant,
      timesMs: decision.timesMs,
      spreads: decision.spreads,
      firstRunMs,
      steady: decision.steady,
      note: decision.reason,
      ...(trial.clock ? { clock: trial.clock.kind } : {}),
      ...(decision.unusable ? { unusable: decision.unusable } : {}),
    };
  }

  private async save(): Promise<void> {
    const store = this.options.store;
    if (!store) return;
    // Merge with what is there now: another engine (or process) may have saved since this one loaded.
    const records: Record<string, TuningChoice> = {};
    for (const [key, entry] of Object.entries((await store.load().catch(() => null)) ?? {})) {
      if (key.startsWith(`v${TUNING_VERSION}|`)) records[key] = entry;
    }
    for (const [key, entry] of this.memory) if (entry.steady !== false) records[`v${TUNING_VERSION}|${key}`] = { ...entry, source: 'sweep' };
    await store.save(records).catch(() => {}); // a read-only disk or full storage costs the memory, nothing else
  }
}
