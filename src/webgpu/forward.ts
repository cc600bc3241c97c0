// The WebGPU backend: a layer's weights on the device, and one forward encoded as one command
// buffer (QKV projection → flash attention → output projection, and the probabilities when asked)
// with one readback. `attendWebGPU` runs the attention kernel alone on given Q, K, V.

import { type ForwardPlan, headLayout, type LayerSpec, type LayerWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { type BufferPool, MAP_MODE_READ, Usage } from './buffers.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { type MaskBuffers, uploadMasks } from './kernels/masks.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import { encodeQkvProjection, packedTargets, type ProjectionWeights, type QkvTargets, qkvLayout } from './kernels/qkv-projection.ts';
import { CallScratch } from './scratch.ts';

/** A layer's weights on the GPU, uploaded once. Missing biases are uploaded as zeros. */
export class GpuLayerWeights {
  readonly projection: ProjectionWeights;
  readonly outProjWeight: GPUBuffer; // [E, E]
  readonly outProjBias: GPUBuffer;   // [E]
  private readonly buffers: GPUBuffer[];

  constructor(private readonly pool: BufferPool, spec: LayerSpec, weights: LayerWeights) {
    const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
    const usage = Usage.STORAGE;
    const bias = pool.upload(weights.inProjBias ?? new Float32Array(N), usage, 'MultiHeadAttention.in_proj_bias');
    this.projection = weights.inProjWeight
      ? { packed: pool.upload(weights.inProjWeight, usage, 'MultiHeadAttention.in_proj_weight'), bias }
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

function write(scratch: CallScratch, data: Float32Array, role: string): GPUBuffer {
  const buffer = scratch.storage(data.byteLength, role);
  scratch.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
  return buffer;
}

/** Encodes flash attention (and the probabilities, when asked) over filled Q, K, V. */
function encodeAttention(pass: GPUComputePassEncoder, scratch: CallScratch, plan: ForwardPlan, targets: QkvTargets, masks: MaskBuffers) {
  const { batches, qRows } = headLayout(plan);
  const { numHeads: H, headDim: Dh } = plan.layer;
  const rows = batches * H * qRows;
  const attention = scratch.storage(rows * Dh * 4, 'attention');  // O [B, H, Sq, Dh]
  const rowStats = scratch.storage(rows * 8, 'rowStats');         // softmax (m, l) per row [B, H, Sq]
  const { q, kv } = targets;
  encodeFlashAttention(pass, scratch, plan, { q, kv, attention, rowStats }, masks);
  const probsBytes = plan.needWeights ? plan.batchSize * H * plan.seqLen * plan.kvSeqLen * 4 : 0;
  const probs = plan.needWeights ? scratch.storage(probsBytes, 'probs') : null; // P [B, H, Sq, Skv]
  if (probs) encodeAttentionProbs(pass, scratch, plan, { q, kv, rowStats, probs }, masks);
  return { attention, probs, probsBytes };
}

/** Copies `sources` into one staging buffer, submits, maps once, and returns a copy of each. */
async function readBack(scratch: CallScratch, encoder: GPUCommandEncoder, sources: { buffer: GPUBuffer; bytes: number }[]): Promise<Float32Array[]> {
  const total = sources.reduce((a, s) => a + s.bytes, 0);
  const readback = scratch.readback(total, 'readback');
  let offset = 0;
  for (const s of sources) {
    encoder.copyBufferToBuffer(s.buffer, 0, readback, offset, s.bytes);
    offset += s.bytes;
  }
  scratch.device.queue.submit([encoder.finish()]);
  await readback.mapAsync(MAP_MODE_READ, 0, total);
  const mapped = readback.getMappedRange(0, total);
  offset = 0;
  const out = sources.map((s) => {
    const copy = new Float32Array(mapped.slice(offset, offset + s.bytes));
    offset += s.bytes;
    return copy;
  });
  readback.unmap();
  return out;
}

/** A KV cache on the GPU: one buffer, K [B, G, maxSeqLen, Dh] then V [B, G, maxSeqLen, Dh], f32. */
export interface GpuKvCache {
  buffer: GPUBuffer;
  maxSeqLen: number;
  /** Floats from the start of the buffer to V. */
  vBase: number;
}

/** Runs one planned forward on the GPU and reads the output [B, Sq, E] (and P [B, H, Sq, Skv] if asked) back. */
export async function forwardWebGPU(pool: BufferPool, weights: GpuLayerWeights, plan: ForwardPlan, cache: GpuKvCache | null = null): Promise<ForwardResult> {
  const device = pool.device;
  const { batches, qRows } = headLayout(plan);
  const E = plan.layer.embedDim;
  const scratch = new CallScratch(pool);
  try {
    const query = write(scratch, plan.query, 'query');                                  // [B, Sq, E]
    const key = plan.mode === 'cross' ? write(scratch, plan.key, 'key') : query;         // [B, Skv, kdim]
    const value = plan.mode !== 'cross' ? query : plan.value === plan.key ? key : write(scratch, plan.value, 'value');
    const { numHeads: H, headDim: Dh } = plan.layer;
    // Q ++ K ++ V head-split in one scratch buffer; with a KV cache, Q alone, and K, V in the cache.
    const targets: QkvTargets = cache && plan.cache
      ? {
          q: scratch.storage(plan.batchSize * H * plan.seqLen * Dh * 4, 'q'),
          kv: { buffer: cache.buffer, kBase: 0, vBase: cache.vBase, stride: cache.maxSeqLen, row0: plan.cache.start },
        }
      : packedTargets(plan, scratch.storage(qkvLayout(plan).total * 4, 'qkv'));
    const masks = uploadMasks(scratch, plan);
    const outputBytes = batches * qRows * E * 4;
    const y = scratch.storage(outputBytes, 'y');                                         // Y [B, Sq, E]

    const encoder = device.createCommandEncoder({ label: 'MultiHeadAttention.forward' });
    const pass = encoder.beginComputePass({ label: 'MultiHeadAttention.forward.pass' });
    encodeQkvProjection(pass, scratch, plan, { query, key, value }, weights.projection, targets);
    const { attention, probs, probsBytes } = encodeAttention(pass, scratch, plan, targets, masks);
    encodeOutputProjection(pass, scratch, plan, { attention, weight: weights.outProjWeight, bias: weights.outProjBias, y });
    pass.end();
    const sources = [{ buffer: y, bytes: outputBytes }, ...(probs ? [{ buffer: probs, bytes: probsBytes }] : [])];
    const [output, attentionWeights] = await readBack(scratch, encoder, sources);
    return attentionWeights ? { output, attentionWeights } : { output };
  } finally {
    scratch.releaseAll();
  }
}

/** The attention kernel alone: Q [B, H, Sq, Dh], K, V [B, G, Skv, Dh] given → O [B, H, Sq, Dh]. */
export async function attendWebGPU(pool: BufferPool, plan: ForwardPlan, q: Float32Array, k: Float32Array, v: Float32Array): Promise<ForwardResult> {
  const device = pool.device;
  const scratch = new CallScratch(pool);
  try {
    const layout = qkvLayout(plan);
    const qkv = scratch.storage(layout.total * 4, 'qkv');
    device.queue.writeBuffer(qkv, 0, q.buffer, q.byteOffset, q.byteLength);
    device.queue.writeBuffer(qkv, layout.kBase * 4, k.buffer, k.byteOffset, k.byteLength);
    device.queue.writeBuffer(qkv, layout.vBase * 4, v.buffer, v.byteOffset, v.byteLength);
    const masks = uploadMasks(scratch, plan);
    const encoder = device.createCommandEncoder({ label: 'scaledDotProductAttention' });
    const pass = encoder.beginComputePass({ label: 'scaledDotProductAttention.pass' });
    const { attention, probs, probsBytes } = encodeAttention(pass, scratch, plan, packedTargets(plan, qkv), masks);
    pass.end();
    const sources = [{ buffer: attention, bytes: q.byteLength }, ...(probs ? [{ buffer: probs, bytes: probsBytes }] : [])];
    const [output, attentionWeights] = await readBack(scratch, encoder, sources);
    return attentionWeights ? { output, attentionWeights } : { output };
  } finally {
    scratch.releaseAll();
  }
}
