// The WebGPU backend: what the engine asks of WebGPU (Backend, backend.ts). It makes the runtime
// (runtime.ts: the device, its loss and recovery, the pool, the limits, and the kernel chooser it
// makes, tuning/scheduler.ts), hands it to each layer it makes, and runs scaledDotProductAttention the
// same way a layer runs its forward, each step called in order here: prepare (pad, split) → begin →
// choose kernels → encode → submit → read → merge → end.

import type { Backend, GpuCapability } from '../backend.ts';
import { DeviceLimitError, UnsupportedError } from '../errors.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan/index.ts';
import type { AdapterInfo, BufferForwardResult, ForwardResult, TuningReport } from '../types.ts';
import { attendWebGPU } from './attend.ts';
import type { BufferPool, Precision } from './buffers.ts';
import { type EngineLimits, mergeResults } from './chunking.ts';
import { WebGPULayer } from './layer.ts';
import { padAttentionPlan, padForwardPlan } from './padding.ts';
import { GpuRuntime } from './runtime.ts';
import { constant } from './shader.ts';
import type { KernelScheduler, Progress } from './tuning/scheduler.ts';
import { packedGeometry } from '../quant/pack.ts';
import type { WeightTensor } from '../quant/types.ts';
import { completionInfo } from './completion.ts';
import { trialClock } from './tuning/trial.ts';
import type { ResolvedTuning } from './tuning/tuner.ts';
import { type AdapterKind, KERNEL_NAMES, type KernelChoice, needsSubgroups, TIER0 } from './variants.ts';

export { withinDispatchLimit } from './runtime.ts';

/** Head sizes the kernels take: vec4 lanes, and q and the accumulator held in registers. */
export const MAX_HEAD_DIM = constant('MAX_HEAD_DIM');

export interface WebGPUBackendOptions {
  device: GPUDevice;
  /** Whether the engine created the device (and so may replace it, and destroys it on dispose). */
  ownsDevice: boolean;
  adapterInfo: AdapterInfo;
  /**
   * The adapter says it is a fallback (software) one (GPUAdapterInfo.isFallbackAdapter): a CPU adapter even
   * where adapterInfo names nothing (Firefox's is empty), so that its first calls compile what a CPU can
   * afford where compiles are in line (variants.ts inLineChoice).
   */
  isFallbackAdapter?: boolean;
  /** Limits to obey below the device's own (createAttentionEngine({ limits })). */
  limits?: Partial<EngineLimits>;
  /** The precision asked for; f16 needs the device's shader-f16 feature. */
  precision?: Precision;
  /** Time each kernel with timestamp queries (where the device has 'timestamp-query'). */
  profile?: boolean;
  /** How kernel variants are chosen (createAttentionEngine({ tuning })). */
  tuning?: ResolvedTuning;
}

export class WebGPUBackend implements Backend, GpuCapability {
  readonly kind = 'webgpu' as const;
  /** The device, its pool, limits and kernel chooser: what layers and calls run with (runtime.ts). */
  readonly runtime: GpuRuntime;
  /** Picks each call's kernel variants: tiers, background compiles and sweeps (the runtime's, tuning/scheduler.ts). */
  readonly scheduler: KernelScheduler;

  constructor(options: WebGPUBackendOptions) {
    try {
      checkForcedFeatures(options.device, options.tuning?.forced ?? {});
    } catch (e) {
      if (options.ownsDevice) options.device.destroy(); // acquired for this engine, which will not exist
      throw e;
    }
    this.runtime = new GpuRuntime({
      device: options.device,
      ownsDevice: options.ownsDevice,
      adapterInfo: options.adapterInfo,
      isFallbackAdapter: options.isFallbackAdapter === true,
      limits: options.limits ?? {},
      precision: options.precision ?? 'f32',
      profile: options.profile ?? false,
      tuning: options.tuning ?? { mode: 'auto', forced: {}, store: null, background: null },
    });
    this.scheduler = this.runtime.scheduler;
  }

  /** This backend is its own GPU side. */
  get gpu(): GpuCapability {
    return this;
  }

  /** The adapter behind the current device (a new one after a recovered loss). */
  get adapterInfo(): AdapterInfo {
    return this.runtime.adapterInfo;
  }

  /** What kind of adapter runs the kernels (variants.ts): it decides the built-in choices and the candidates. */
  adapterKind(): AdapterKind {
    return this.runtime.current().adapter.kind;
  }

  tuningReport(): TuningReport {
    const { tuner } = this.scheduler;
    const { options } = tuner;
    const { adapter } = this.runtime.current();
    return {
      mode: options.mode,
      store: options.store?.where ?? 'memory',
      forced: { ...options.forced },
      defaults: this.scheduler.builtIn(adapter),
      choices: tuner.entries(adapter),
      tier0: { ...TIER0 },
      compiled: [...this.scheduler.compiled],
      background: this.scheduler.background(),
      pending: this.scheduler.pending,
      failures: [...this.scheduler.failures],
      timing: this.timing(),
    };
  }

  /** How sweeps time kernels here, and how this implementation completes GPU work (completion.ts). */
  private timing(): TuningReport['timing'] {
    const clock = trialClock(this.device);
    const c = completionInfo(this.device);
    return { clock: clock.kind, completionMs: c.probeMs === null ? null : Math.round(c.probeMs * 100) / 100, timerDriven: c.timerDriven, nudged: c.nudged };
  }

  settled(): Promise<void> {
    return this.scheduler.settled();
  }

  /** Whether work may be compiled in the background on this implementation (scheduler.ts backgroundCompiles): the backend chooser's measurements too. */
  backgroundCompiles(): boolean {
    return this.scheduler.backgroundCompiles();
  }

  /** Compiles (and runs once) the final kernels of each plan, now, with progress per kernel. */
  warmup(plans: readonly ForwardPlan[], onProgress?: Progress): Promise<void> {
    return this.upFront('warmup', plans, onProgress);
  }

  /** Sweeps each kernel of each plan now, with progress per kernel. */
  tune(plans: readonly ForwardPlan[], onProgress?: Progress): Promise<void> {
    return this.upFront('tune', plans, onProgress);
  }

  /** The scheduler's background work, done now on the live device (not counted in flight: it is not a call). */
  private async upFront(what: 'warmup' | 'tune', plans: readonly ForwardPlan[], onProgress?: Progress): Promise<void> {
    const where = `AttentionEngine.${what}`;
    const state = await this.runtime.live(where);
    try {
      await this.scheduler[what](state, plans.map(padForwardPlan), KERNEL_NAMES, onProgress);
    } catch (e) {
      throw await this.runtime.lostDuring(where, state, e);
    }
  }

  /** Whether forwards report kernel timings (profile asked for, and the device has timestamp-query). */
  get profiling(): boolean {
    return this.runtime.profiling;
  }

  /** The storage precision in use: f16 only where asked for and the device has shader-f16. */
  get precision(): Precision {
    return this.runtime.pool.precision;
  }

  /** Why f16 was asked for and f32 is used; null otherwise. */
  get precisionNote(): string | null {
    return this.runtime.precisionNote;
  }

  /** The current device (a new one after a recovered loss). */
  get device(): GPUDevice {
    return this.runtime.device;
  }

  get pool(): BufferPool {
    return this.runtime.pool;
  }

  /** The device's limits, lowered by the engine's `limits` option. */
  limits(): EngineLimits {
    return this.runtime.limits();
  }

  /** scaledDotProductAttention and linearAttention: plan → prepare (pad, split) → the attention kernel alone (attend.ts). */
  async attend(callPlan: ForwardPlan): Promise<ForwardResult | BufferForwardResult> {
    const userDh = callPlan.layer.headDim;
    checkHeadDim('scaledDotProductAttention', 'options.headDim', String(userDh), userDh);
    const plan = padAttentionPlan(callPlan);
    const where = 'scaledDotProductAttention';
    // Linear attention: no kernel variant is chosen (variants.ts kernelsOf).
    const call = this.runtime.prepare(where, plan, ['flash_attention'], { mod: plan.layer.scoreMod, argument: 'options.scoreMod' });
    const state = await this.runtime.begin(call); // in flight until end() below
    try {
      const results: (ForwardResult | BufferForwardResult)[] = [];
      for (const part of call.parts) {
        const choice = await this.runtime.chooseKernels(state, part, call.kernels);
        results.push(await attendWebGPU(state.pool, part, choice.flash_attention, userDh));
      }
      return mergeResults(results);
    } catch (e) {
      throw await this.runtime.lostDuring(where, state, e);
    } finally {
      this.runtime.end();
    }
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): WebGPULayer {
    const ownHeadDim = spec.numHeads * spec.headDim !== spec.embedDim; // config.headDim given, H·Dh ≠ E
    if (ownHeadDim) checkHeadDim('createMultiHeadAttention', 'config.headDim', String(spec.headDim), spec.headDim);
    else checkHeadDim('createMultiHeadAttention', 'embedDim / numHeads (the head size)', `${spec.embedDim} / ${spec.numHeads} = ${spec.headDim}`, spec.headDim);
    const maxBinding = Math.min(this.limits().maxStorageBufferBindingSize, this.limits().maxBufferSize);
    // Each weight is one binding: the fused in_proj_weight where there is one, else q, k and v apart.
    const each = weights.inProjWeight
      ? { in_proj_weight: weights.inProjWeight }
      : { q_proj_weight: weights.qProjWeight, k_proj_weight: weights.kProjWeight, v_proj_weight: weights.vProjWeight };
    for (const [name, w] of Object.entries({ ...each, 'out_proj.weight': weights.outProjWeight })) {
      const bytes = gpuWeightBytes(w);
      if (bytes > maxBinding) {
        throw new DeviceLimitError({
          where: 'createMultiHeadAttention',
          argument: `stateDict["${name}"]`,
          expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes on this device`,
          given: `${bytes} bytes`,
          fix: "Weights are not split across buffers; use a smaller layer or createAttentionEngine({ backend: 'cpu' }).",
        });
      }
    }
    return new WebGPULayer(this.runtime, spec, weights);
  }

  stats() {
    return this.runtime.stats();
  }

  dispose(): void {
    this.runtime.dispose();
  }
}

/** The largest buffer a weight takes on the GPU: float32, or a packed weight's quants (weights.ts; its scaleOffset is smaller for groups ≥ 16). */
function gpuWeightBytes(w: WeightTensor): number {
  if (w instanceof Float32Array) return w.byteLength;
  const [N, K] = w.shape;
  return N * Math.ceil((K * packedGeometry(w).bits) / 32) * 4;
}

/** A forced subgroup variant needs a device with the `subgroups` feature (candidates never offer one without it). */
function checkForcedFeatures(device: GPUDevice, forced: Partial<KernelChoice>): void {
  for (const [kernel, variant] of Object.entries(forced)) {
    if (variant === undefined || !needsSubgroups(variant) || device.features.has('subgroups')) continue;
    throw new UnsupportedError({
      where: 'createAttentionEngine',
      argument: `options.tuning.kernels.${kernel}`,
      expected: 'a variant this device can run',
      given: `"${variant}", which needs the "subgroups" feature this device was created without`,
      fix: "Leave it out (the tuner offers subgroup variants where the device has the feature), or pass a device requested with requiredFeatures: ['subgroups'].",
    });
  }
}

/** Heads of any size up to MAX_HEAD_DIM (q and the accumulator live in registers); sizes not multiples of 4 run padded (padding.ts). */
function checkHeadDim(where: string, argument: string, given: string, Dh: number): void {
  if (Dh <= MAX_HEAD_DIM) return;
  throw new UnsupportedError({
    where,
    argument,
    expected: `at most ${MAX_HEAD_DIM} on the WebGPU backend`,
    given,
    fix: "Choose sizes so the head size fits, or use createAttentionEngine({ backend: 'cpu' }), which takes any size.",
  });
}
