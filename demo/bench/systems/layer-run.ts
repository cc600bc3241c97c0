// How this engine's systems (engine, wasm, wasm-threads, cpu) run a benchmark shape on a layer: a
// forward over the whole sequence, or, for a shape with a KV cache (BenchShape.cacheLen), a decode
// step: the new tokens attend over a cache that starts from the shape's past keys and values. Each
// step appends to the cache (as a decoder does); after CACHE_SLACK steps the cache is made again
// from the past, so every run sees cacheLen to cacheLen + CACHE_SLACK·seqLen positions, and the
// first run (the correctness gate) exactly cacheLen.

import type { ForwardResult, KvCache, MultiHeadAttention } from 'webgpu-attention';
import type { BenchLayer } from '../types.ts';

const CACHE_SLACK = 64;

export interface LayerRun {
  /** One forward (a step, with a cache): its whole result (timings included where the engine profiles). */
  forward(query: Float32Array): Promise<ForwardResult>;
  /** The same, its output only. */
  run(query: Float32Array): Promise<Float32Array>;
  dispose(): void;
}

export function layerRun(layer: MultiHeadAttention, { shape, past }: Pick<BenchLayer, 'shape' | 'past'>): LayerRun {
  const { batchSize, seqLen, isCausal, cacheLen = 0 } = shape;
  const options = { batchSize, seqLen, isCausal };
  const withOutput = (forward: LayerRun['forward'], dispose: () => void): LayerRun => ({ forward, run: async (query) => (await forward(query)).output, dispose });
  if (cacheLen === 0)
    return withOutput(
      (query) => layer.forward(query, options) as Promise<ForwardResult>,
      () => {},
    );
  if (!past) throw new Error(`a shape with a KV cache (cacheLen ${cacheLen}) needs the cache's past keys and values (BenchLayer.past)`);
  const fresh = (): KvCache => layer.createKvCache({ batchSize, maxSeqLen: cacheLen + CACHE_SLACK * seqLen, key: past.key, value: past.value });
  let cache = fresh();
  return withOutput(
    (query) => {
      if (cache.length + seqLen > cache.maxSeqLen) {
        cache.dispose();
        cache = fresh();
      }
      return layer.forward(query, { ...options, kvCache: cache }) as Promise<ForwardResult>;
    },
    () => cache.dispose(),
  );
}
