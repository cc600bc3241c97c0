// The CPU backend: the float64 reference, run pass by pass. Used when there is no WebGPU adapter.

import type { Backend, BackendLayer } from '../backend.ts';
import { copyWeights, type ForwardPlan, type LayerSpec, type LayerWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { attention, referenceForward } from './reference.ts';

export class CpuBackend implements Backend {
  readonly kind = 'cpu' as const;

  createLayer(_spec: LayerSpec, weights: LayerWeights): BackendLayer {
    // Copy, as the WebGPU backend's upload does: later changes to the caller's arrays do not leak in.
    const own = copyWeights(weights);
    return {
      forward: async (plan) => {
        const r = referenceForward(plan, own, { keepScores: plan.needWeights });
        const output = Float32Array.from(r.output);
        return r.probs ? { output, attentionWeights: Float32Array.from(r.probs) } : { output };
      },
      dispose: () => {},
    };
  }

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const keep = plan.needWeights
      ? { scores: new Float64Array(B * plan.layer.numHeads * Sq * Skv), probs: new Float64Array(B * plan.layer.numHeads * Sq * Skv) }
      : undefined;
    const o = attention(plan, Float64Array.from(plan.query), Float64Array.from(plan.key), Float64Array.from(plan.value), keep);
    const output = Float32Array.from(o);
    return keep ? { output, attentionWeights: Float32Array.from(keep.probs) } : { output };
  }

  stats() {
    return { buffers: 0, bytes: 0 };
  }

  dispose(): void {}
}
