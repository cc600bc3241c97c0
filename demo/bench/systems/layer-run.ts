// How this engine's systems (engine, wasm, wasm-threads, cpu) run a benchmark shape on a layer: a
// forward over the whole sequence, or, for a shape with a KV cache (BenchShape.cacheLen), a decode
// step: the new tokens attend over a cache that starts from the shape's past keys and values. Each
// step appends to the cache (as a decoder does); after CACHE_SLACK steps the cache is made again
// from the past, so every run sees cacheLen to cacheLen + CACHE_SLACK·seqLen positions, and the
// first run (the correctness gate) exactly cacheLen.

import type { KvCache, MultiHeadAttention } from 'webgpu-attention';
import type { BenchLayer } from '../types.ts';

const CACHE_SLACK = 64;

export interface LayerRun {
  run(query: Float32Array): Promise<Float32Array>;
  dispose(): void;
}

export function layerRun(layer: MultiHeadAttention, { shape, past }: Pick<BenchLayer, 'shape' | 'past'>): LayerRun {
  const { batchSize, seqLen, isCausal, cacheLen = 0 } = shape;
  const options = { batchSize, seqLen, isCausal };
  if (cacheLen === 0) return { run: async (query) => (await layer.forward(query, options)).output, dispose: () => {} };
  if (!past) throw new Error(`a shape with a KV cache (cacheLen ${cacheLen}) needs the cache's past keys and values (BenchLayer.past)`);
  const fresh = (): KvCache => layer.createKvCache({ batchSize, maxSeqLen: cacheLen + CACHE_SLACK * seqLen, key: past.key, value: past.value });
  let cache = fresh();
  return {
    async run(query) {
      if (cache.length + seqLen > cache.maxSeqLen) {
        cache.dispose();
        cache = fresh();
      }
      return (await layer.forward(query, { ...options, kvCache: cache })).output;
    },
    dispose: () => cache.dispose(),
  };
}
