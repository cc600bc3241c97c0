// A layer's weights on the GPU: uploaded once per device, destroyed with the layer (or its device).

import type { FloatLayerWeights, LayerSpec } from '../plan/index.ts';
import { type BufferPool, Usage } from './buffers.ts';
import type { ProjectionWeights } from './kernels/qkv-projection.ts';

/** A layer's weights on the GPU, uploaded once. Missing biases are uploaded as zeros. */
export class GpuLayerWeights {
  readonly projection: ProjectionWeights;
  readonly outProjWeight: GPUBuffer; // [E, E]
  readonly outProjBias: GPUBuffer; // [E]
  private readonly buffers: GPUBuffer[];

  constructor(
    private readonly pool: BufferPool,
    spec: LayerSpec,
    weights: FloatLayerWeights,
  ) {
    const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
    const usage = Usage.STORAGE;
    const bias = pool.upload(weights.inProjBias ?? new Float32Array(N), usage, 'MultiHeadAttention.in_proj_bias');
    this.projection = weights.inProjWeight
      ? { inProj: pool.upload(weights.inProjWeight, usage, 'MultiHeadAttention.in_proj_weight'), bias }
      : {
          q: pool.upload(weights.qProjWeight, usage, 'MultiHeadAttention.q_proj_weight'),
          k: pool.upload(weights.kProjWeight, usage, 'MultiHeadAttention.k_proj_weight'),
          v: pool.upload(weights.vProjWeight, usage, 'MultiHeadAttention.v_proj_weight'),
          bias,
        };
    this.outProjWeight = pool.upload(weights.outProjWeight, usage, 'MultiHeadAttention.out_proj.weight');
    this.outProjBias = pool.upload(weights.outProjBias ?? new Float32Array(spec.embedDim), usage, 'MultiHeadAttention.out_proj.bias');
    this.buffers = [...Object.values(this.projection), this.outProjWeight, this.outProjBias];
  }

  destroy(): void {
    for (const b of this.buffers) this.pool.destroy(b);
  }
}
