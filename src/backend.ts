// The backends are implementations of one plan: this is the contract between them and the
// engine and layers, which never ask which backend they hold. What only some backends have (a GPU:
// its adapter, device, timings and kernel tuning; threads) is an optional capability, absent
// elsewhere, never a stub; the engine answers for a backend without it (engine.ts).

import type { KvCacheStorage } from './kv-cache.ts';
import type { PagedKvStorage } from './paged-kv-cache.ts';
import type { ForwardPlan, LayerSpec, LayerWeights, PagedPlan } from './plan/index.ts';
import type { AdapterInfo, BackendKind, KvCacheDtype, BufferForwardResult, EngineStats, ForwardResult, TuningReport, WarmupOptions } from './types.ts';

export interface BackendLayer {
  /** Runs a resolved plan (its inputs included). Returns the output [B, Sq, E] (and the probabilities when plan.needWeights). */
  forward(plan: ForwardPlan): Promise<ForwardResult | BufferForwardResult>;
  /** Storage for a KV cache of this layer: K and V [B, G, maxSeqLen, Dh], stored as `dtype`. */
  createCacheStorage(batchSize: number, maxSeqLen: number, dtype: KvCacheDtype): KvCacheStorage;
  /** A cache's dtype when createKvCache is not told one ('f32' on the CPU, the engine's precision on WebGPU). */
  readonly defaultCacheDtype: KvCacheDtype;
  /** A PagedKvCache's pool for this layer: K and V of maxBlocks blocks [G, blockSize, Dh], stored as `dtype`. Absent: the backend has no paged kernels (refused). */
  createPagedStorage?(blockSize: number, maxBlocks: number, dtype: KvCacheDtype): PagedKvStorage;
  /**
   * A call on a PagedKvCache: each sequence's new K and V written into its blocks (plan.sequences[i].blocks,
   * reserved), then its queries attending over its positions 0 … start + length − 1 as plan.sequences[i].plan
   * says. Resolves to the output [T, E].
   */
  forwardPaged?(plan: PagedPlan): Promise<ForwardResult>;
  /** Releases what the layer holds (GPU weights) at once. */
  dispose(): void;
}

/** What a backend on a GPU has: an adapter and device, GPU memory, kernel timings, kernels compiled and tuned per shape. */
export interface GpuCapability {
  /** The adapter behind the device. */
  readonly adapterInfo: AdapterInfo;
  /** The current device (a new one after a recovered loss). */
  readonly device: GPUDevice;
  /** Whether forwards report kernel timings. */
  readonly profiling: boolean;
  /** How kernel variants are chosen and what was chosen. */
  tuningReport(): TuningReport;
  /** Resolves when the background work the calls so far caused (compiles, sweeps) is done. */
  settled(): Promise<void>;
  /** Compiles, now, the kernels calls of these shapes will run. */
  warmup(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void>;
  /** Measures, now, which kernel variants are fastest for these shapes. */
  tune(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void>;
  /** GPU buffers and bytes held. */
  stats(): EngineStats;
}

/** What a backend running on threads has. */
export interface ThreadCapability {
  /** Threads the forwards run on. */
  readonly threads: number;
  /** Why fewer threads run than were asked for (or than the cores); null when not. */
  readonly note: string | null;
}

export interface Backend {
  readonly kind: BackendKind;
  /** The storage precision in use. */
  readonly precision: 'f32' | 'f16';
  /** Why the precision asked for is not the one in use; null when it is. */
  readonly precisionNote: string | null;
  /** The GPU side; absent on a backend without a GPU (then: no adapter or device, nothing to tune, no GPU memory). */
  readonly gpu?: GpuCapability;
  /** Threads; absent on a backend that runs on one. */
  readonly threading?: ThreadCapability;
  /** The build of the 'wasm' kernels (src/wasm/kernels.ts WasmSimd); absent on a backend without them. */
  readonly wasmSimd?: 'relaxed' | 'simd128';
  /** The attention kernel alone on plan.query [B, H, Sq, Dh], plan.key and plan.value [B, G, Skv, Dh]: O [B, H, Sq, Dh]. */
  attend(plan: ForwardPlan): Promise<ForwardResult | BufferForwardResult>;
  /** Throws (before any GPU work) if this backend cannot run a layer of this spec. */
  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer;
  dispose(): void;
}
