// The WebGPU backend: one device at a time, its buffer pool and (per device) pipeline cache; device
// loss and recovery; the limits the engine obeys, and chunking of calls that exceed them.
//
// Device loss. The backend watches `device.lost`. A call whose device is lost while it runs rejects
// with DeviceLostError. The next call finds the loss, asks for a new adapter and device (a lost
// adapter gives no new device), and re-uploads each layer's weights from the host copy the layer
// keeps; pipelines rebuild themselves (their cache is keyed by device). A device the caller gave
// cannot be replaced: calls then reject with DeviceLostError saying so.

import type { Backend } from '../backend.ts';
import { DeviceLimitError, DeviceLostError, UnsupportedError } from '../errors.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan/index.ts';
import type { AdapterInfo, BufferForwardResult, ForwardResult, TuningReport } from '../types.ts';
import { BufferPool, type Precision } from './buffers.ts';
import { type EngineLimits, mergeResults, splitPlan } from './chunking.ts';
import { acquireDevice, type DeviceState } from './device.ts';
import { attendWebGPU } from './attend.ts';
import { WebGPULayer } from './layer.ts';
import { padAttentionPlan, padForwardPlan } from './padding.ts';
import { checkScoreMod } from './score-mod.ts';
import { constant } from './shader.ts';
import { flashAttentionPipeline } from './kernels/flash-attention.ts';
import { outputProjectionPipeline } from './kernels/output-projection.ts';
import { qkvProjectionPipeline } from './kernels/qkv-projection.ts';
import type { PipelineSpec } from './pipelines.ts';
import { gateVariant } from './tuning/gate.ts';
import { KernelScheduler, type Progress } from './tuning/scheduler.ts';
import { timeKernel } from './tuning/trial.ts';
import { type ResolvedTuning, Tuner } from './tuning/tuner.ts';
import {
  type AdapterKind,
  type AttentionVariant,
  adapterKind as kindOf,
  defaultChoice,
  gemmShape,
  KERNEL_NAMES,
  type KernelChoice,
  type KernelName,
  needsSubgroups,
  type ProjectionVariant,
  TIER0,
} from './variants.ts';

/** Head sizes the kernels take: vec4 lanes, and q and the accumulator held in registers. */
export const MAX_HEAD_DIM = constant('MAX_HEAD_DIM');

export interface WebGPUBackendOptions {
  device: GPUDevice;
  /** Whether the engine created the device (and so may replace it, and destroys it on dispose). */
  ownsDevice: boolean;
  adapterInfo: AdapterInfo;
  /** Limits to obey below the device's own (createAttentionEngine({ limits })). */
  limits?: Partial<EngineLimits>;
  /** The precision asked for; f16 needs the device's shader-f16 feature. */
  precision?: Precision;
  /** Time each kernel with timestamp queries (where the device has 'timestamp-query'). */
  profile?: boolean;
  /** How kernel variants are chosen (createAttentionEngine({ tuning })). */
  tuning?: ResolvedTuning;
}

export class WebGPUBackend implements Backend {
  readonly kind = 'webgpu' as const;
  readonly threads = 1;
  readonly threadsNote = null;
  private state: DeviceState;
  private disposed = false;
  private recovering: Promise<DeviceState> | null = null;
  /** The highest peakBytes of the pools of devices lost before the current one. */
  private earlierPeakBytes = 0;

  adapterInfo: AdapterInfo;
  private readonly ownsDevice: boolean;
  private readonly limitOverrides: Partial<EngineLimits>;
  private readonly requestedPrecision: Precision;
  private readonly profile: boolean;

  constructor(options: WebGPUBackendOptions) {
    this.ownsDevice = options.ownsDevice;
    this.adapterInfo = options.adapterInfo;
    this.limitOverrides = options.limits ?? {};
    this.requestedPrecision = options.precision ?? 'f32';
    this.profile = options.profile ?? false;
    try {
      checkForcedFeatures(options.device, options.tuning?.forced ?? {});
    } catch (e) {
      if (options.ownsDevice) options.device.destroy(); // acquired for this engine, which will not exist
      throw e;
    }
    this.state = this.adopt(options.device, 0);
    const tuner = new Tuner(
      options.tuning ?? { mode: 'auto', forced: {}, store: null },
      () => {
        const a = this.adapterInfo;
        return [a.vendor, a.architecture, a.device, a.description].join('/');
      },
      () => this.adapterKind(),
      (kernel, variant, headDim) => gateVariant(this.state.pool, this.adapterKind(), kernel, variant, headDim),
      () => this.state.device.features.has('subgroups'),
    );
    this.scheduler = new KernelScheduler(
      {
        current: () => (this.disposed || this.state.lost ? null : this.state),
        kind: () => this.adapterKind(),
        pipelineOf: (state, plan, kernel, variant) => pipelineOf(state, plan, kernel, variant),
        time: (state, plan, kernel, variant, repeat) => timeKernel(state.pool, plan, kernel, variant, repeat),
        // The sweeps' trial and gate buffers sit idle in the pool once the queue is empty: they go (the
        // next call takes its own scratch again, once).
        drained: () => this.state.pool.trim(),
      },
      tuner,
    );
  }

  /** What kind of adapter runs the kernels (variants.ts): it decides the built-in choices and the candidates. */
  adapterKind(): AdapterKind {
    return kindOf(this.adapterInfo);
  }

  /** Picks each call's kernel variants: tiers, background compiles and sweeps (tuning/scheduler.ts). */
  readonly scheduler: KernelScheduler;

  tuningReport(): TuningReport {
    const { tuner } = this.scheduler;
    const { options } = tuner;
    return {
      mode: options.mode,
      store: options.store?.where ?? 'memory',
      forced: { ...options.forced },
      defaults: defaultChoice(this.adapterKind(), this.state.device.features.has('subgroups')),
      choices: tuner.entries(),
      tier0: { ...TIER0 },
      compiled: [...this.scheduler.compiled],
      pending: this.scheduler.pending,
      failures: [...this.scheduler.failures],
    };
  }

  /** The kernel variants a call of this plan runs now, chosen before it encodes anything (tuning/scheduler.ts). */
  async chooseKernels(state: DeviceState, plan: ForwardPlan, kernels: readonly KernelName[] = KERNEL_NAMES): Promise<KernelChoice> {
    return withinDispatchLimit(await this.scheduler.choose(state, plan, kernels), plan, this.limits().maxComputeWorkgroupsPerDimension);
  }

  call<T>(work: () => Promise<T>): Promise<T> {
    return this.scheduler.call(work);
  }

  settled(): Promise<void> {
    return this.scheduler.settled();
  }

  warmup(plans: readonly ForwardPlan[], onProgress?: Progress): Promise<void> {
    return this.run('AttentionEngine.warmup', (state) => this.scheduler.warmup(state, plans.map(padForwardPlan), KERNEL_NAMES, onProgress));
  }

  tune(plans: readonly ForwardPlan[], onProgress?: Progress): Promise<void> {
    return this.run('AttentionEngine.tune', (state) => this.scheduler.tune(state, plans.map(padForwardPlan), KERNEL_NAMES, onProgress));
  }

  /** Whether forwards report kernel timings (profile asked for, and the device has timestamp-query). */
  get profiling(): boolean {
    return this.profile && this.state.device.features.has('timestamp-query');
  }

  /** The storage precision in use: f16 only where asked for and the device has shader-f16. */
  get precision(): Precision {
    return this.state.pool.precision;
  }

  /** Why f16 was asked for and f32 is used; null otherwise. */
  get precisionNote(): string | null {
    return this.requestedPrecision === 'f16' && this.precision === 'f32'
      ? "precision 'f16' needs the adapter feature shader-f16, which this adapter lacks: running in f32"
      : null;
  }

  /** The current device (a new one after a recovered loss). */
  get device(): GPUDevice {
    return this.state.device;
  }

  get pool(): BufferPool {
    return this.state.pool;
  }

  /** The device's limits, lowered by the engine's `limits` option. */
  limits(): EngineLimits {
    const l = this.state.device.limits;
    const o = this.limitOverrides;
    return {
      maxStorageBufferBindingSize: Math.min(l.maxStorageBufferBindingSize, o.maxStorageBufferBindingSize ?? Infinity),
      maxBufferSize: Math.min(l.maxBufferSize, o.maxBufferSize ?? Infinity),
      maxComputeWorkgroupsPerDimension: Math.min(l.maxComputeWorkgroupsPerDimension, o.maxComputeWorkgroupsPerDimension ?? Infinity),
    };
  }

  private adopt(device: GPUDevice, generation: number): DeviceState {
    const precision: Precision = this.requestedPrecision === 'f16' && device.features.has('shader-f16') ? 'f16' : 'f32';
    const state: DeviceState = { device, pool: new BufferPool(device, 'AttentionEngine', precision), generation, lost: null };
    device.lost.then((info) => {
      state.lost = info;
    });
    return state;
  }

  /** The live device, recovering from a loss first (once, however many calls wait). */
  private async live(where: string): Promise<DeviceState> {
    await null; // let a just-resolved device.lost run its handler first
    const state = this.state;
    if (!state.lost) return state;
    if (!this.ownsDevice) {
      throw new DeviceLostError(
        `${where}: the GPUDevice given to createAttentionEngine was lost (${state.lost.reason}: ${state.lost.message}) and only its owner can replace it. ` +
          'Create a new engine with a new device.',
        state.lost.reason,
      );
    }
    this.recovering ??= (async () => {
      const acquired = await acquireDevice();
      if (this.disposed) {
        acquired.device.destroy();
        throw new DeviceLostError(`${where}: the engine was disposed while its device was being replaced.`, 'destroyed');
      }
      this.adapterInfo = acquired.adapterInfo;
      this.earlierPeakBytes = Math.max(this.earlierPeakBytes, state.pool.peakBytes);
      this.state = this.adopt(acquired.device, state.generation + 1);
      return this.state;
    })().finally(() => {
      this.recovering = null;
    });
    return this.recovering;
  }

  /** Runs `work` on the live device; if the device is lost meanwhile, rejects with DeviceLostError. */
  async run<T>(where: string, work: (state: DeviceState) => Promise<T>): Promise<T> {
    const state = await this.live(where);
    try {
      return await work(state);
    } catch (e) {
      // A lost device rejects pending mapAsync calls; give device.lost a moment to say so.
      const lost = state.lost ?? (await Promise.race([state.device.lost, new Promise<null>((r) => setTimeout(() => r(null), 50))]));
      if (!lost) throw e;
      throw new DeviceLostError(
        `${where}: the GPU device was lost during the call (${lost.reason}${lost.message ? `: ${lost.message}` : ''}). ` +
          (this.ownsDevice ? 'The next call runs on a new device.' : 'Create a new engine with a new device.'),
        lost.reason,
      );
    }
  }

  async attend(callPlan: ForwardPlan): Promise<ForwardResult | BufferForwardResult> {
    const userDh = callPlan.layer.headDim;
    checkHeadDim('scaledDotProductAttention', 'options.headDim', String(userDh), userDh);
    const plan = padAttentionPlan(callPlan);
    const parts = splitPlan(plan, this.limits());
    if ((plan.gpu || plan.returnBuffer) && parts.length > 1) {
      throw new DeviceLimitError({
        where: 'scaledDotProductAttention',
        argument: 'a call with GPU buffers (inputs or returnBuffer)',
        expected: 'within the device limits in one piece',
        given: `a batch that would need ${parts.length} pieces`,
        fix: 'Split the batch yourself (calls with GPU buffers are not split).',
      });
    }
    return this.call(() =>
      this.run('scaledDotProductAttention', async (state) => {
        await checkScoreMod(state.device, state.pool.precision, plan.layer.scoreMod, 'scaledDotProductAttention', 'options.scoreMod');
        const results: ForwardResult[] = [];
        for (const p of parts) {
          const { flash_attention } = await this.chooseKernels(state, p, ['flash_attention']); // linear attention: none chosen (variants.ts kernelsOf)
          const result = await attendWebGPU(state.pool, p, flash_attention, userDh);
          if (parts.length === 1) return result;
          results.push(result as ForwardResult);
        }
        return mergeResults(results);
      }),
    );
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): WebGPULayer {
    checkHeadDim('createMultiHeadAttention', 'embedDim / numHeads (the head size)', `${spec.embedDim} / ${spec.numHeads} = ${spec.headDim}`, spec.headDim);
    const maxBinding = Math.min(this.limits().maxStorageBufferBindingSize, this.limits().maxBufferSize);
    for (const [name, w] of Object.entries({ in_proj_weight: weights.inProjWeight ?? weights.qProjWeight, 'out_proj.weight': weights.outProjWeight })) {
      if (w.byteLength > maxBinding) {
        throw new DeviceLimitError({
          where: 'createMultiHeadAttention',
          argument: `stateDict["${name}"]`,
          expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes on this device`,
          given: `${w.byteLength} bytes`,
          fix: "Weights are not split across buffers; use a smaller layer or createAttentionEngine({ backend: 'cpu' }).",
        });
      }
    }
    return new WebGPULayer(this, spec, weights);
  }

  stats() {
    return { ...this.state.pool.stats(), peakBytes: Math.max(this.earlierPeakBytes, this.state.pool.peakBytes) };
  }

  /** The current device generation and pool (for layers and KV caches). */
  current(): { pool: BufferPool; generation: number } {
    return this.state;
  }

  dispose(): void {
    this.disposed = true;
    this.state.pool.destroyAll();
    if (this.ownsDevice) this.state.device.destroy();
  }
}

/** The pipeline `variant` of `kernel` needs for this plan on this device. */
function pipelineOf(state: DeviceState, plan: ForwardPlan, kernel: KernelName, variant: string): PipelineSpec {
  const { precision } = state.pool;
  switch (kernel) {
    case 'qkv_projection':
      return qkvProjectionPipeline(precision, variant as ProjectionVariant);
    case 'output_projection':
      return outputProjectionPipeline(precision, variant as ProjectionVariant);
    case 'flash_attention':
      return flashAttentionPipeline(state.device, precision, plan.layer.headDim, variant as AttentionVariant, plan.layer.scoreMod?.wgsl);
  }
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

/**
 * The choice, with any projection GEMM whose row tiles would need more workgroups along the rows than
 * the device allows replaced by register-4x4: its 32 rows per workgroup are what chunking.ts splits
 * calls for (the subgroup cores cover 4 to 16 rows per workgroup).
 */
export function withinDispatchLimit(choice: KernelChoice, plan: ForwardPlan, maxWorkgroups: number): KernelChoice {
  const queryRows = plan.batchSize * plan.seqLen; // varlen: seqLen is all tokens
  const kvRows = plan.cache ? queryRows : plan.batchSize * plan.kvSeqLen; // with a cache, the new tokens only
  const fits = (variant: ProjectionVariant, rows: number) => Math.ceil(rows / gemmShape(variant).tileRows) <= maxWorkgroups;
  const out = { ...choice };
  if (out.qkv_projection && !fits(out.qkv_projection, Math.max(queryRows, kvRows))) out.qkv_projection = 'register-4x4';
  if (out.output_projection && !fits(out.output_projection, queryRows)) out.output_projection = 'register-4x4';
  return out;
}
