// The CPU backend: the float64 reference, run pass by pass. Used when there is no WebGPU adapter.

import type { Backend, BackendLayer } from '../backend.ts';
import type { LayerSpec, LayerWeights } from '../plan.ts';
import { referenceForward } from './reference.ts';

export class CpuBackend implements Backend {
  readonly kind = 'cpu' as const;

  createLayer(_spec: LayerSpec, weights: LayerWeights): BackendLayer {
    // Copy, as the WebGPU backend's upload does: later changes to the caller's arrays do not leak in.
    const own: LayerWeights = {
      inProjWeight: weights.inProjWeight.slice(),
      inProjBias: weights.inProjBias?.slice() ?? null,
      outProjWeight: weights.outProjWeight.slice(),
      outProjBias: weights.outProjBias?.slice() ?? null,
    };
    return {
      forward: async (plan, query) => {
        const r = referenceForward(plan, own, query, { keepScores: plan.needWeights });
        const output = Float32Array.from(r.output);
        return r.probs ? { output, attentionWeights: Float32Array.from(r.probs) } : { output };
      },
      dispose: () => {},
    };
  }

  stats() {
    return { buffers: 0, bytes: 0 };
  }

  dispose(): void {}
}
