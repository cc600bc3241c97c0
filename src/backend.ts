// The two backends are two implementations of one plan: this is the contract between them and the layer.

import type { KvCacheStorage } from './kv-cache.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from './plan.ts';
import type { BackendKind, BufferForwardResult, EngineStats, ForwardResult } from './types.ts';

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
  /** The attention kernel alone on plan.query [B, H, Sq, Dh], plan.key and plan.value [B, G, Skv, Dh]: O [B, H, Sq, Dh]. */
  attend(plan: ForwardPlan): Promise<ForwardResult>;
  /** Throws (before any GPU work) if this backend cannot run a layer of this spec. */
  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer;
  stats(): EngineStats;
  dispose(): void;
}
