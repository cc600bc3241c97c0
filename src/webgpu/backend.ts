// The WebGPU backend: one device at a time, its buffer pool and (per device) pipeline cache; device
// loss and recovery; the limits the engine obeys, and chunking of calls that exceed them.
//
// Device loss. The backend watches `device.lost`. A call whose device is lost while it runs rejects
// with DeviceLostError. The next call finds the loss, asks for a new adapter and device (a lost
// adapter gives no new device), and re-uploads each layer's weights from the host copy the layer
// keeps; pipelines rebuild themselves (their cache is keyed by device). A device the caller gave
// cannot be replaced: calls then reject with DeviceLostError saying so.

import type { Backend, BackendLayer } from '../backend.ts';
import { DeviceLimitError, DeviceLostError, UnsupportedError } from '../errors.ts';
import { copyWeights, type ForwardPlan, type LayerSpec, type LayerWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { BufferPool, type Precision } from './buffers.ts';
import { type EngineLimits, mergeResults, splitPlan } from './chunking.ts';
import { type AcquiredDevice, acquireDevice } from './device.ts';
import { attendWebGPU, forwardWebGPU, type GpuKvCache, GpuLayerWeights } from './forward.ts';
import type { KvCacheStorage } from '../kv-cache.ts';
import { Usage } from './buffers.ts';
import { gateVariant } from './gate.ts';
import { type ResolvedTuning, Tuner } from './tuning.ts';
import { isCpuAdapter } from './variants.ts';

/** Head sizes the kernels take: vec4 lanes, and q and the accumulator held in registers. */
export const MAX_HEAD_DIM = 256;

/** One device and what lives on it. A new generation after each recovery from a loss. */
interface DeviceState {
  device: GPUDevice;
  pool: BufferPool;
  generation: number;
  lost: GPUDeviceLostInfo | null;
}

export class WebGPUBackend implements Backend {
  readonly kind = 'webgpu' as const;
  private state: DeviceState;
  private disposed = false;
  private recovering: Promise<DeviceState> | null = null;
  /** The highest peakBytes of the pools of devices lost before the current one. */
  private earlierPeakBytes = 0;

  constructor(
    device: GPUDevice,
    /** Whether the engine created the device (and so may replace it, and destroys it on dispose). */
    private readonly ownsDevice: boolean,
    public adapterInfo: AcquiredDevice['adapterInfo'],
    /** Limits to obey below the device's own (createAttentionEngine({ limits })). */
    private readonly limitOverrides: Partial<EngineLimits> = {},
    /** The precision asked for; f16 needs the device's shader-f16 feature. */
    private readonly requestedPrecision: Precision = 'f32',
    /** Time each kernel with timestamp queries (where the device has 'timestamp-query'). */
    private readonly profile = false,
    /** How kernel variants are chosen (createAttentionEngine({ tuning })). */
    tuning: ResolvedTuning = { mode: 'auto', forced: {}, store: null },
  ) {
    this.state = this.adopt(device, 0);
    const info = () => this.adapterInfo;
    this.tuner = new Tuner(
      tuning,
      () => {
        const a = info();
        return [a.vendor, a.architecture, a.device, a.description].join('/');
      },
      () => isCpuAdapter(info()),
      (kernel, variant, headDim) => gateVariant(this.state.pool, isCpuAdapter(info()), kernel, variant, headDim),
    );
  }

  /** Picks each forward's kernel variants: sweeps on first use per adapter and shape class (tuning.ts). */
  readonly tuner: Tuner;

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
  private async run<T>(where: string, work: (state: DeviceState) => Promise<T>): Promise<T> {
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

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    checkHeadDim('scaledDotProductAttention', 'options.headDim', String(plan.layer.headDim), plan.layer.headDim);
    const parts = splitPlan(plan, this.limits());
    return this.run('scaledDotProductAttention', async (state) => {
      const results: ForwardResult[] = [];
      for (const p of parts) results.push(await attendWebGPU(state.pool, p, p.query, p.key, p.value, this.tuner));
      return mergeResults(results);
    });
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    checkHeadDim('createMultiHeadAttention', 'embedDim / numHeads (the head size)', `${spec.embedDim} / ${spec.numHeads} = ${spec.headDim}`, spec.headDim);
    for (const [name, dim] of [
      ['kdim', spec.kdim],
      ['vdim', spec.vdim],
    ] as const) {
      if (dim % 4 !== 0) {
        throw new UnsupportedError({
          where: 'createMultiHeadAttention',
          argument: `config.${name}`,
          expected: 'a multiple of 4 on the WebGPU backend (the projections read vec4s)',
          given: String(dim),
          fix: "Pad the key/value channels to a multiple of 4, or use createAttentionEngine({ backend: 'cpu' }).",
        });
      }
    }
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
    // The host copy outlives a device loss; the GPU copy is made for each device generation.
    const host = copyWeights(weights);
    let gpu = new GpuLayerWeights(this.state.pool, spec, host);
    let generation = this.state.generation;
    return {
      createCacheStorage: (B, maxSeqLen) => new WebGPUKvCache(this, B, spec.numKvHeads, maxSeqLen, spec.headDim),
      forward: (plan) => {
        const parts = splitPlan(plan, this.limits());
        if ((plan.cache || plan.gpu || plan.returnBuffer) && parts.length > 1) {
          const what = plan.cache ? 'a call with kvCache' : 'a call with GPU buffers (inputs or returnBuffer)';
          throw new DeviceLimitError({
            where: 'MultiHeadAttention.forward',
            argument: what,
            expected: 'within the device limits in one piece',
            given: `a batch that would need ${parts.length} pieces`,
            fix: `Split the batch yourself (${what} is not split).`,
          });
        }
        return this.run('MultiHeadAttention.forward', async (state) => {
          if (generation !== state.generation) {
            gpu = new GpuLayerWeights(state.pool, spec, host);
            generation = state.generation;
          }
          const cache = plan.cache ? (plan.cache.cache.storage as WebGPUKvCache).live(state.generation) : null;
          if (parts.length === 1) return forwardWebGPU(state.pool, gpu, parts[0], cache, this.profiling, this.tuner);
          const results: ForwardResult[] = [];
          for (const p of parts) results.push((await forwardWebGPU(state.pool, gpu, p, cache, false, this.tuner)) as ForwardResult);
          return mergeResults(results);
        });
      },
      dispose: () => {
        if (generation === this.state.generation) gpu.destroy();
        this.state.pool.trim(); // idle scratch goes too, so stats() returns to what it was before the layer
      },
    };
  }

  stats() {
    return { ...this.state.pool.stats(), peakBytes: Math.max(this.earlierPeakBytes, this.state.pool.peakBytes) };
  }

  /** @internal The current device generation and pool (for KV caches). */
  current(): { pool: BufferPool; generation: number } {
    return this.state;
  }

  dispose(): void {
    this.disposed = true;
    this.state.pool.destroyAll();
    if (this.ownsDevice) this.state.device.destroy();
  }
}

/**
 * A KV cache's GPU buffer, K then V [B, G, maxSeqLen, Dh]. It belongs to one device generation: after a
 * device loss its contents are gone, and a forward with it says so until reset() reallocates it.
 */
class WebGPUKvCache implements KvCacheStorage {
  private buffer: GPUBuffer | null = null;
  private generation = -1;
  private readonly bytes: number;

  constructor(
    private readonly backend: WebGPUBackend,
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
  ) {
    this.bytes = 2 * B * G * maxSeqLen * Dh * backend.pool.elementBytes;
    const maxBinding = Math.min(backend.limits().maxStorageBufferBindingSize, backend.limits().maxBufferSize);
    if (this.bytes > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.createKvCache',
        argument: 'the cache, 2·batchSize·numKvHeads·maxSeqLen·headDim·4 bytes',
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${this.bytes} bytes`,
        fix: 'Use a smaller maxSeqLen or batchSize.',
      });
    }
    this.allocate();
  }

  private allocate(): void {
    const { pool, generation } = this.backend.current();
    this.buffer = pool.allocate(this.bytes, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC, 'KvCache');
    this.generation = generation;
  }

  /** The buffer, if it lives on the current device; else the loss is reported. */
  live(generation: number): GpuKvCache {
    if (!this.buffer || this.generation !== generation) {
      throw new DeviceLostError(
        "MultiHeadAttention.forward: the KV cache's keys and values were lost with the GPU device (they cannot be rebuilt from anything the engine keeps). " +
          'Call cache.reset() and prefill it again.',
        'destroyed',
      );
    }
    return { buffer: this.buffer, maxSeqLen: this.maxSeqLen, vBase: this.B * this.G * this.maxSeqLen * this.Dh };
  }

  reset(): void {
    // Rows past the cache's length are never read (Skv bounds every read), so a live buffer is kept
    // as it is; one lost with its device is made anew on the current device.
    if (!this.buffer || this.generation !== this.backend.current().generation) this.allocate();
  }

  dispose(): void {
    if (this.buffer && this.generation === this.backend.current().generation) this.backend.current().pool.destroy(this.buffer);
    this.buffer = null;
  }
}

function checkHeadDim(where: string, argument: string, given: string, Dh: number): void {
  if (Dh % 4 === 0 && Dh <= MAX_HEAD_DIM) return;
  throw new UnsupportedError({
    where,
    argument,
    expected: `a multiple of 4 from 4 to ${MAX_HEAD_DIM} on the WebGPU backend`,
    given,
    fix: "Choose sizes so the head size fits, or use createAttentionEngine({ backend: 'cpu' }), which takes any size.",
  });
}
