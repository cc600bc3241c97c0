// The CPU backend: the float64 reference, run pass by pass. Used when there is no WebGPU adapter.

import type { Backend, BackendLayer } from '../backend.ts';
import { UnsupportedError } from '../errors.ts';
import { copyWeights, floatLayerWeights, type ForwardPlan, isFloat, geometryOf, type LayerSpec, type LayerWeights } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import { type CpuCacheStorage, CpuEncodedKvCache, CpuKvCache, CpuPagedStorage } from './kv-cache.ts';
import { transformHeads } from './head-transform.ts';
import { attention, outputProjection, qkvProjection, referenceForward } from './reference.ts';

export class CpuBackend implements Backend {
  readonly kind = 'cpu' as const;
  /** The CPU computes in float64 and returns float32. */
  readonly precision = 'f32' as const;
  readonly precisionNote: string | null;

  constructor(options: { precision?: 'f32' | 'f16' } = {}) {
    this.precisionNote = options.precision === 'f16' ? "precision 'f16' applies to WebGPU; the CPU backend computes in float64" : null;
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    // Copy, as the WebGPU backend's upload does: later changes to the caller's arrays do not leak in.
    // Quantized weights are dequantized once, exactly (a new array: no copy needed).
    const own = isFloat(weights) ? copyWeights(weights) : floatLayerWeights(weights);
    const { numKvHeads: G, headDim: Dh, numHeads: H } = spec;
    return {
      defaultCacheDtype: 'f32',
      // Every dtype (the option checked by plan/kv-cache.ts: known, and Dh % 32 = 0 for the blocks).
      createCacheStorage: (B, maxSeqLen, dtype) => (dtype === 'f32' ? new CpuKvCache(B, G, maxSeqLen, Dh) : new CpuEncodedKvCache(dtype, B, G, maxSeqLen, Dh)),
      createPagedStorage: (blockSize, maxBlocks, dtype) => new CpuPagedStorage(dtype, blockSize, maxBlocks, G, Dh),
      forwardPaged: async (paged) => {
        // Each sequence as a plain cached call of it alone: project its tokens, write their K and V into its blocks, attend over its positions.
        const store = paged.cache.storage as CpuPagedStorage;
        const E = spec.embedDim;
        const output = new Float32Array(paged.tokens * E);
        for (const s of paged.sequences) {
          const plan = s.plan;
          const { q, k, v } = qkvProjection({ ...plan, kvSeqLen: s.length, geometry: geometryOf('self', 1, s.length, s.length) }, own);
          store.append(s.blocks, k, v, s.start, s.length);
          const o = attention(plan, q, store.reader('key', s.blocks), store.reader('value', s.blocks));
          output.set(outputProjection(plan, own, o), s.row * E);
        }
        return { output };
      },
      forward: async (plan) => {
        refuseGpuBuffers('MultiHeadAttention.forward', plan);
        if (plan.cache) {
          // Project the new tokens, append their K and V, attend over every cached position.
          const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
          const store = plan.cache.cache.storage as CpuCacheStorage;
          // The new tokens alone: Sq queries, Sq keys and values.
          const { q, k, v } = qkvProjection({ ...plan, kvSeqLen: Sq, geometry: geometryOf('self', B, Sq, Sq), cache: null }, own);
          store.append(k, v, plan.cache.start, Sq);
          const keep = plan.needWeights ? { scores: new Float64Array(B * H * Sq * Skv), probs: new Float64Array(B * H * Sq * Skv) } : undefined;
          // K and V read in place (no copy of the cache): the new tokens see their own stored, rounded rows.
          const o = attention(plan, q, store.reader('key'), store.reader('value'), keep);
          const output = Float32Array.from(outputProjection(plan, own, o));
          return keep ? { output, attentionWeights: Float32Array.from(keep.probs) } : { output };
        }
        const r = referenceForward(plan, own, { keepScores: plan.needWeights });
        const output = Float32Array.from(r.output);
        return r.probs ? { output, attentionWeights: Float32Array.from(r.probs) } : { output };
      },
      dispose: () => {},
    };
  }

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    refuseGpuBuffers('scaledDotProductAttention', plan);
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const keep = plan.needWeights
      ? { scores: new Float64Array(B * plan.layer.numHeads * Sq * Skv), probs: new Float64Array(B * plan.layer.numHeads * Sq * Skv) }
      : undefined;
    const q = Float64Array.from(plan.query);
    const k = Float64Array.from(plan.key);
    // With rotary: the queries and the last Sq keys turn by their positions (earlier keys are taken as turned).
    transformHeads(plan, q, 'query', plan.layer.numHeads, Sq);
    transformHeads(plan, k, 'key', plan.layer.numKvHeads, Sq, Skv, Skv - Sq);
    const o = attention(plan, q, k, Float64Array.from(plan.value), keep);
    const output = Float32Array.from(o);
    return keep ? { output, attentionWeights: Float32Array.from(keep.probs) } : { output };
  }

  dispose(): void {}
}

/** GPU buffers in or out are WebGPU's: the CPU (and 'wasm') backend refuses them, saying so. */
export function refuseGpuBuffers(where: string, plan: ForwardPlan, given = 'an engine on the CPU backend'): void {
  if (!plan.gpu && !plan.returnBuffer) return;
  throw new UnsupportedError({
    where,
    argument: plan.gpu ? 'a GPUBuffer input' : 'options.returnBuffer',
    expected: 'used on the WebGPU backend only',
    given,
    fix: 'Pass Float32Arrays and read output, or run on WebGPU.',
  });
}
