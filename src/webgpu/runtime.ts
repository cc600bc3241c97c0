// What every WebGPU call runs with, made by the backend and handed to its layers and KV caches: the
// device (one at a time; its loss and recovery), its buffer pool, the limits the engine obeys, and the
// kernel chooser (tuning/scheduler.ts), which the runtime makes in its constructor. A call goes one way
// through it, its caller (layer.ts forward, backend.ts attend) taking the steps in order itself:
//
//   plan (plan/) → prepare (pad, split to the limits: this file) → begin (counted in flight, the live
//   device, the scoreMod compiled) → choose each piece's kernels → encode, submit, read (forward.ts,
//   attend.ts, call.ts) → the pieces' results merged → end
//
// and nothing in it calls back up: a layer holds its weights and this runtime, never the backend; the
// scheduler is told what varies as data (the DeviceState: its device, pool, adapter, and `retired`,
// which this runtime sets when the device is lost or the engine disposed).
//
// Device loss. The runtime watches `device.lost`. A call whose device is lost while it runs rejects
// with DeviceLostError (lostDuring). The next call finds the loss, asks for a new adapter and device (a
// lost adapter gives no new device), and layers re-upload their weights from the host copy they keep;
// pipelines rebuild themselves (their cache is keyed by device). A device the caller gave cannot be
// replaced: calls then reject with DeviceLostError saying so.

import { DeviceLimitError, DeviceLostError } from '../errors.ts';
import type { ForwardPlan } from '../plan/index.ts';
import type { AdapterInfo, ScoreMod } from '../types.ts';
import { BufferPool, type Precision } from './buffers.ts';
import { type EngineLimits, splitPlan } from './chunking.ts';
import { probeCompletion } from './completion.ts';
import { acquireDevice, type DeviceAdapter, type DeviceState } from './device.ts';
import { checkScoreMod } from './score-mod.ts';
import { type DeviceWork, KernelScheduler } from './tuning/scheduler.ts';
import type { ResolvedTuning } from './tuning/tuner.ts';
import { adapterKind, gemmShape, KERNEL_NAMES, type KernelChoice, type KernelName, type ProjectionVariant } from './variants.ts';

export interface RuntimeOptions {
  device: GPUDevice;
  ownsDevice: boolean;
  adapterInfo: AdapterInfo;
  /** The adapter says it is a fallback (software) one (GPUAdapterInfo.isFallbackAdapter): a CPU adapter even where adapterInfo names nothing. */
  isFallbackAdapter: boolean;
  limits: Partial<EngineLimits>;
  precision: Precision;
  profile: boolean;
  /** How kernel variants are chosen (createAttentionEngine({ tuning })). */
  tuning: ResolvedTuning;
}

/** One call, prepared: where it comes from, its pieces, the kernels it may run and the scoreMod it compiles. */
export interface PreparedCall {
  where: string;
  /** The call split to the device's limits (one piece when it fits). */
  parts: ForwardPlan[];
  /** The kernels whose variants are chosen (an SDPA call runs the attention kernel only). */
  kernels: readonly KernelName[];
  scoreMod: { mod: ScoreMod | null; argument: string };
}

export class GpuRuntime {
  private state: DeviceState;
  private disposed = false;
  private recovering: Promise<DeviceState> | null = null;
  /** The highest peakBytes of the pools of devices lost before the current one. */
  private earlierPeakBytes = 0;
  /** Picks each call's kernel variants: tiers, background compiles and sweeps (tuning/scheduler.ts). */
  readonly scheduler: KernelScheduler;

  /** `work`: what the scheduler runs on a device (tests pass stand-ins; tuning/scheduler.ts DEVICE_WORK). */
  constructor(
    private readonly options: RuntimeOptions,
    work?: DeviceWork,
  ) {
    this.state = this.adopt(options.device, 0, options.adapterInfo, options.isFallbackAdapter);
    this.scheduler = new KernelScheduler(options.tuning, work);
  }

  /** The adapter behind the current device (a new one after a recovered loss). */
  get adapterInfo(): AdapterInfo {
    return this.state.adapter.info;
  }

  /** The current device generation and pool (for layers and KV caches). */
  current(): DeviceState {
    return this.state;
  }

  get device(): GPUDevice {
    return this.state.device;
  }

  get pool(): BufferPool {
    return this.state.pool;
  }

  /** Whether forwards report kernel timings (profile asked for, and the device has timestamp-query). */
  get profiling(): boolean {
    return this.options.profile && this.state.device.features.has('timestamp-query');
  }

  /** Why f16 was asked for and f32 is used; null otherwise. */
  get precisionNote(): string | null {
    return this.options.precision === 'f16' && this.state.pool.precision === 'f32'
      ? "precision 'f16' needs the adapter feature shader-f16, which this adapter lacks: running in f32"
      : null;
  }

  /** The device's limits, lowered by the engine's `limits` option. */
  limits(): EngineLimits {
    const l = this.state.device.limits;
    const o = this.options.limits;
    return {
      maxStorageBufferBindingSize: Math.min(l.maxStorageBufferBindingSize, o.maxStorageBufferBindingSize ?? Infinity),
      maxBufferSize: Math.min(l.maxBufferSize, o.maxBufferSize ?? Infinity),
      maxComputeWorkgroupsPerDimension: Math.min(l.maxComputeWorkgroupsPerDimension, o.maxComputeWorkgroupsPerDimension ?? Infinity),
    };
  }

  stats() {
    return { ...this.state.pool.stats(), peakBytes: Math.max(this.earlierPeakBytes, this.state.pool.peakBytes) };
  }

  /**
   * The prepare step's split: `plan` (padded) in pieces that fit the limits. Calls with a KV cache,
   * GPU buffers or returnBuffer are not split: one that would need pieces is refused.
   */
  prepare(where: string, plan: ForwardPlan, kernels: readonly KernelName[], scoreMod: PreparedCall['scoreMod']): PreparedCall {
    const parts = splitPlan(plan, this.limits());
    if ((plan.cache || plan.gpu || plan.returnBuffer) && parts.length > 1) {
      const what = plan.cache ? 'a call with kvCache' : 'a call with GPU buffers (inputs or returnBuffer)';
      throw new DeviceLimitError({
        where,
        argument: what,
        expected: 'within the device limits in one piece',
        given: `a batch that would need ${parts.length} pieces`,
        fix: `Split the batch yourself (${what} is not split).`,
      });
    }
    return { where, parts, kernels, scoreMod };
  }

  /**
   * Begins a prepared call: counted in flight from here (background work waits for calls; the caller
   * calls end() once, however the call ends), on the live device, its scoreMod compiled. Resolves with
   * the device state the call runs on; if it rejects, the call has ended.
   */
  async begin(call: PreparedCall): Promise<DeviceState> {
    this.scheduler.begin();
    try {
      const state = await this.live(call.where);
      try {
        await checkScoreMod(state.device, state.pool.precision, call.scoreMod.mod, call.where, call.scoreMod.argument);
      } catch (e) {
        throw await this.lostDuring(call.where, state, e);
      }
      return state;
    } catch (e) {
      this.scheduler.end();
      throw e;
    }
  }

  /** The kernel variants a call of this plan runs now, chosen before it encodes anything (tuning/scheduler.ts). */
  async chooseKernels(state: DeviceState, plan: ForwardPlan, kernels: readonly KernelName[] = KERNEL_NAMES): Promise<KernelChoice> {
    return withinDispatchLimit(await this.scheduler.choose(state, plan, kernels), plan, this.limits().maxComputeWorkgroupsPerDimension);
  }

  /** Ends a call begun with begin() (background work may start once no call is under way). */
  end(): void {
    this.scheduler.end();
  }

  /**
   * What a call on `state` that failed with `error` rejects with: DeviceLostError when the device was
   * lost meanwhile, else `error` itself. A caller writes `catch (e) { throw await runtime.lostDuring(where, state, e) }`.
   */
  async lostDuring(where: string, state: DeviceState, error: unknown): Promise<unknown> {
    // A lost device rejects pending mapAsync calls; give device.lost a moment to say so.
    const lost = state.lost ?? (await Promise.race([state.device.lost, new Promise<null>((r) => setTimeout(() => r(null), 50))]));
    if (!lost) return error;
    return new DeviceLostError(
      `${where}: the GPU device was lost during the call (${lost.reason}${lost.message ? `: ${lost.message}` : ''}). ` +
        (this.options.ownsDevice ? 'The next call runs on a new device.' : 'Create a new engine with a new device.'),
      lost.reason,
    );
  }

  /** The live device, recovering from a loss first (once, however many calls wait). */
  async live(where: string): Promise<DeviceState> {
    await null; // let a just-resolved device.lost run its handler first
    const state = this.state;
    if (!state.lost) return state;
    if (!this.options.ownsDevice) {
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
      this.earlierPeakBytes = Math.max(this.earlierPeakBytes, state.pool.peakBytes);
      this.state = this.adopt(acquired.device, state.generation + 1, acquired.adapterInfo, acquired.isFallbackAdapter);
      return this.state;
    })().finally(() => {
      this.recovering = null;
    });
    return this.recovering;
  }

  dispose(): void {
    this.disposed = true;
    this.state.retired = true; // background work queued on it is dropped
    this.state.pool.destroyAll();
    if (this.options.ownsDevice) this.state.device.destroy();
  }

  private adopt(device: GPUDevice, generation: number, info: AdapterInfo, isFallbackAdapter: boolean): DeviceState {
    const precision: Precision = this.options.precision === 'f16' && device.features.has('shader-f16') ? 'f16' : 'f32';
    const kind = adapterKind(info);
    const adapter: DeviceAdapter = {
      info,
      key: [info.vendor, info.architecture, info.device, info.description].join('/'),
      kind,
      software: isFallbackAdapter || kind !== 'gpu',
      subgroups: device.features.has('subgroups'),
    };
    const state: DeviceState = { device, pool: new BufferPool(device, 'AttentionEngine', precision), generation, adapter, lost: null, retired: false };
    device.lost.then((info) => {
      state.lost = info;
      state.retired = true;
    });
    void probeCompletion(device); // whether waits on it need nudging (completion.ts)
    return state;
  }
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
