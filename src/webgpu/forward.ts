// The WebGPU backend: a layer's weights on the device, and one forward encoded as one command
// buffer (QKV projection → flash attention → output projection, and the probabilities when asked)
// with one readback.

import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { type BufferPool, MAP_MODE_READ, Usage } from './buffers.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import { encodeQkvProjection, qkvLayout } from './kernels/qkv-projection.ts';
import { CallScratch } from './scratch.ts';

/** A layer's weights on the GPU, uploaded once. Missing biases are uploaded as zeros. */
export class GpuLayerWeights {
  readonly inProjWeight: GPUBuffer;  // [(H + 2G)·Dh, E]
  readonly inProjBias: GPUBuffer;    // [(H + 2G)·Dh]
  readonly outProjWeight: GPUBuffer; // [E, E]
  readonly outProjBias: GPUBuffer;   // [E]

  constructor(private readonly pool: BufferPool, spec: LayerSpec, weights: LayerWeights) {
    const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
    const usage = Usage.STORAGE;
    this.inProjWeight = pool.upload(weights.inProjWeight, usage, 'MultiHeadAttention.in_proj_weight');
    this.inProjBias = pool.upload(weights.inProjBias ?? new Float32Array(N), usage, 'MultiHeadAttention.in_proj_bias');
    this.outProjWeight = pool.upload(weights.outProjWeight, usage, 'MultiHeadAttention.out_proj.weight');
    this.outProjBias = pool.upload(weights.outProjBias ?? new Float32Array(spec.embedDim), usage, 'MultiHeadAttention.out_proj.bias');
  }

  destroy(): void {
    for (const b of [this.inProjWeight, this.inProjBias, this.outProjWeight, this.outProjBias]) this.pool.destroy(b);
  }
}

/** Runs one planned forward on the GPU and reads the output [B, Sq, E] (and P [B, H, Sq, Skv] if asked) back. */
export async function forwardWebGPU(pool: BufferPool, weights: GpuLayerWeights, plan: ForwardPlan, query: Float32Array): Promise<ForwardResult> {
  const device = pool.device;
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const { embedDim: E, numHeads: H, headDim: Dh } = plan.layer;
  const scratch = new CallScratch(pool);
  try {
    const outputBytes = B * Sq * E * 4;
    const probsBytes = plan.needWeights ? B * H * Sq * Skv * 4 : 0;
    const x = scratch.storage(query.byteLength, 'x');                          // X [B, Sq, E]
    const qkv = scratch.storage(qkvLayout(plan).total * 4, 'qkv');             // Q [B,H,Sq,Dh] ++ K, V [B,G,Skv,Dh]
    const attention = scratch.storage(B * H * Sq * Dh * 4, 'attention');      // O [B, H, Sq, Dh]
    const rowStats = scratch.storage(B * H * Sq * 8, 'rowStats');              // softmax (m, l) per row [B, H, Sq]
    const y = scratch.storage(outputBytes, 'y');                               // Y [B, Sq, E]
    const probs = plan.needWeights ? scratch.storage(probsBytes, 'probs') : null; // P [B, H, Sq, Skv]
    const readback = scratch.readback(outputBytes + probsBytes, 'readback');   // Y ++ P
    device.queue.writeBuffer(x, 0, query.buffer, query.byteOffset, query.byteLength);

    const encoder = device.createCommandEncoder({ label: 'MultiHeadAttention.forward' });
    const pass = encoder.beginComputePass({ label: 'MultiHeadAttention.forward.pass' });
    encodeQkvProjection(pass, scratch, plan, { x, weight: weights.inProjWeight, bias: weights.inProjBias, qkv });
    encodeFlashAttention(pass, scratch, plan, { qkv, attention, rowStats });
    encodeOutputProjection(pass, scratch, plan, { attention, weight: weights.outProjWeight, bias: weights.outProjBias, y });
    if (probs) encodeAttentionProbs(pass, scratch, plan, { qkv, rowStats, probs });
    pass.end();
    encoder.copyBufferToBuffer(y, 0, readback, 0, outputBytes);
    if (probs) encoder.copyBufferToBuffer(probs, 0, readback, outputBytes, probsBytes);
    device.queue.submit([encoder.finish()]);

    await readback.mapAsync(MAP_MODE_READ, 0, outputBytes + probsBytes);
    const mapped = readback.getMappedRange(0, outputBytes + probsBytes);
    const output = new Float32Array(mapped.slice(0, outputBytes));
    const attentionWeights = probs ? new Float32Array(mapped.slice(outputBytes, outputBytes + probsBytes)) : undefined;
    readback.unmap();
    return attentionWeights ? { output, attentionWeights } : { output };
  } finally {
    scratch.releaseAll();
  }
}
