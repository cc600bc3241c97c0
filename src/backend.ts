// The backends are implementations of one plan: this is the contract between them and the
// engine and layers, which never ask which backend they hold.

import type { KvCacheStorage } from './kv-cache.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from './plan/index.ts';
import type { AdapterInfo, BackendKind, BufferForwardResult, EngineStats, ForwardResult, TuningReport, WarmupOptions } from './types.ts';

export interface BackendLayer {
  /** Runs a resolved plan (its inputs included). Returns the output [B, Sq, E] (and the probabilities when plan.needWeights). */
  forward(plan: ForwardPlan): Promise<ForwardResult | BufferForwardResult>;
  /** Storage for a KV cache of this layer: K and V [B, G, maxSeqLen, Dh]. */
  createCacheStorage(batchSize: number, maxSeqLen: number): KvCacheStorage;
  /** Releases what the layer holds (GPU weights) at once. */
  dispose(): void;
}

export interface Backend {
  readonly kind: BackendKind;
  /** The adapter behind the device; null without one. */
  readonly adapterInfo: AdapterInfo | null;
  /** The current device (a new one after a recovered loss); null without one. */
  readonly device: GPUDevice | null;
  /** The storage precision in use. */
  readonly precision: 'f32' | 'f16';
  /** Why the precision asked for is not the one in use; null when it is. */
  readonly precisionNote: string | null;
  /** Threads the forwards run on (1 but on the 'wasm' backend with threads). */
  readonly threads: number;
  /** Why fewer threads run than were asked for (or than the cores); null when not. */
  readonly threadsNote: string | null;
  /** Whether forwards report kernel timings. */
  readonly profiling: boolean;
  /** How kernel variants are chosen and what was chosen; null where there are none. */
  tuningReport(): TuningReport | null;
  /** Resolves when the background work the calls so far caused (compiles, sweeps) is done. */
  settled(): Promise<void>;
  /** Compiles, now, the kernels calls of these shapes will run. */
  warmup(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void>;
  /** Measures, now, which kernel variants are fastest for these shapes. */
  tune(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void>;
  /** The attention kernel alone on plan.query [B, H, Sq, Dh], plan.key and plan.value [B, G, Skv, Dh]: O [B, H, Sq, Dh]. */
  attend(plan: ForwardPlan): Promise<ForwardResult | BufferForwardResult>;
  /** Throws (before any GPU work) if this backend cannot run a layer of this spec. */
  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer;
  stats(): EngineStats;
  dispose(): void;
}
