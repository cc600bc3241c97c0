// One forward on the GPU, its kernel variants already chosen: the prepare and encode steps of a
// call (inputs in, QKV projection → head transform → attention → output projection, and the
// probabilities when asked), handed to call.ts, which submits them as one command buffer inside
// error scopes and reads the output back. attend.ts runs the attention part alone (attentionStages).
// Nothing here chooses variants or compiles ahead: the caller passes the choice (tuning/scheduler.ts).

import type { ForwardPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import type { BufferPool } from './buffers.ts';
import { checkBufferSizes, runCall } from './call.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeCopyRows } from './kernels/copy-tensor.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { encodeHeadTransform } from './kernels/head-transform.ts';
import { encodeLinearAttention } from './kernels/linear-attention.ts';
import { type MaskBuffers, uploadMasks } from './kernels/masks.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import { encodeQkvProjection, type QkvTargets, qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import type { Unpadded } from './padding.ts';
import type { PassStages } from './profiler.ts';
import type { CallScratch } from './scratch.ts';
import type { AttentionVariant, KernelChoice } from './variants.ts';
import type { GpuLayerWeights } from './weights.ts';

const WHERE = 'MultiHeadAttention.forward';

/** Where the attention output and each row's softmax statistics go. */
export function attentionBuffers(scratch: CallScratch, plan: ForwardPlan): { attention: GPUBuffer; rowStats: GPUBuffer } {
  const { batches, qRows } = plan.geometry;
  const { numHeads: H, headDim: Dh } = plan.layer;
  const rows = batches * H * qRows;
  return {
    attention: scratch.storage(rows * Dh * scratch.elementBytes, 'attention'), // O [B, H, Sq, Dh]
    rowStats: scratch.storage(rows * 8, 'rowStats'), // softmax (m, l) per row [B, H, Sq]
  };
}

/** The probabilities' buffer, when asked for: P [B, H, Sq, Skv] (f32). */
export function probsBuffer(scratch: CallScratch, plan: ForwardPlan): { probs: GPUBuffer | null; probsBytes: number } {
  const probsBytes = plan.needWeights ? plan.batchSize * plan.layer.numHeads * plan.seqLen * plan.kvSeqLen * 4 : 0;
  return { probs: plan.needWeights ? scratch.storage(probsBytes, 'probs') : null, probsBytes };
}

/** A KV cache on the GPU: one buffer, K [B, G, capacity, Dh] then V [B, G, capacity, Dh] (capacity: the cache's maxSeqLen). */
export interface GpuKvCache {
  buffer: GPUBuffer;
  /** Positions each (b, g) block holds. */
  capacity: number;
  /** Elements from the start of the buffer to V. */
  vBase: number;
}

/**
 * The attention part of a call, shared by forward and scaledDotProductAttention: the head transform
 * (rotary, QK-norm) where the layer has one, the attention kernel (flash, or linear), and the
 * probabilities with needWeights.
 */
export function attentionStages(
  stages: PassStages,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: QkvTargets['kv']; attention: GPUBuffer; rowStats: GPUBuffer; probs: GPUBuffer | null },
  masks: MaskBuffers,
  variant: AttentionVariant,
): void {
  const { q, kv, attention, rowStats, probs } = buffers;
  if (plan.layer.rotary || plan.layer.qkNorm) stages.run('head_transform', (pass) => encodeHeadTransform(pass, scratch, plan, { q, kv }));
  if (plan.layer.attention === 'linear') stages.run('linear_attention', (pass) => encodeLinearAttention(pass, scratch, plan, { q, kv, attention }, masks));
  else stages.run('flash_attention', (pass) => encodeFlashAttention(pass, scratch, plan, { q, kv, attention, rowStats }, masks, variant));
  if (probs) stages.run('attention_probs', (pass) => encodeAttentionProbs(pass, scratch, plan, { q, kv, rowStats, probs }, masks));
}

/**
 * Runs one planned forward on the GPU and reads the output [B, Sq, E] (and P [B, H, Sq, Skv] if asked)
 * back, or leaves them in new buffers (returnBuffer). `unpadded`: the caller's sizes when the plan's
 * layer is padded (padding.ts), else null. Rejects with WebGPUCallError when WebGPU refused the work (call.ts).
 */
export function forwardWebGPU(
  pool: BufferPool,
  weights: GpuLayerWeights,
  plan: ForwardPlan,
  cache: GpuKvCache | null,
  profile: boolean,
  choice: KernelChoice,
  unpadded: Unpadded | null = null,
): Promise<ForwardResult | BufferForwardResult> {
  const { batches, qRows, kvRows } = plan.geometry;
  const E = plan.layer.embedDim; // Ep when padded
  const userE = unpadded?.embedDim ?? E;
  const g = plan.gpu;
  if (g) {
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const { embedDim: uE, kdim: uK, vdim: uV } = unpadded ?? plan.layer;
    checkBufferSizes(WHERE, pool.elementBytes, [
      ['query', g.query, `[B, Sq, E] = [${B}, ${Sq}, ${uE}]`, B * Sq * uE],
      ['options.key', g.key, `[B, Skv, kdim] = [${B}, ${Skv}, ${uK}]`, B * Skv * uK],
      ['options.value', g.value, `[B, Skv, vdim] = [${B}, ${Skv}, ${uV}]`, B * Skv * uV],
    ]);
  }
  const options = { where: WHERE, callerBuffers: g !== null, returnBuffer: plan.returnBuffer, profile };
  return runCall(pool, options, ({ scratch, stages, resultTarget }) => {
    // Inputs: the caller's GPUBuffers where given (read in place, or copied to padded rows), else
    // uploads of the arrays (at the engine's precision).
    const copies: { src: GPUBuffer; dst: GPUBuffer; rows: number; srcCols: number; dstCols: number }[] = [];
    const caller = (buffer: GPUBuffer, rows: number, cols: number, colsTo: number, role: string): GPUBuffer => {
      if (cols === colsTo) return buffer;
      const dst = scratch.storage(rows * colsTo * scratch.elementBytes, role);
      copies.push({ src: buffer, dst, rows, srcCols: cols, dstCols: colsTo });
      return dst;
    };
    const { kdim, vdim } = plan.layer;
    const query = g?.query ? caller(g.query, batches * qRows, userE, E, 'query') : scratch.tensor(plan.query, 'query'); // [B, Sq, E]
    const key = plan.mode !== 'cross' ? query : g?.key ? caller(g.key, batches * kvRows, unpadded?.kdim ?? kdim, kdim, 'key') : scratch.tensor(plan.key, 'key'); // [B, Skv, kdim]
    let value = query; // [B, Skv, vdim]
    if (plan.mode === 'cross') {
      if (g?.value) value = caller(g.value, batches * kvRows, unpadded?.vdim ?? vdim, vdim, 'value');
      else if (plan.value === plan.key && !g?.key)
        value = key; // one array for both: one upload
      else value = scratch.tensor(plan.value, 'value');
    }
    const { numHeads: H, headDim: Dh } = plan.layer;
    // Q ++ K ++ V head-split in one scratch buffer; with a KV cache, Q alone, and K, V in the cache.
    const targets: QkvTargets =
      cache && plan.cache
        ? {
            q: scratch.storage(plan.batchSize * H * plan.seqLen * Dh * scratch.elementBytes, 'q'),
            kv: { buffer: cache.buffer, kBase: 0, vBase: cache.vBase, stride: cache.capacity, row0: plan.cache.start },
          }
        : qkvBufferTargets(plan, scratch.storage(qkvLayout(plan).total * scratch.elementBytes, 'qkv'));
    const masks = uploadMasks(scratch, plan);
    // Y [B, Sq, E] at the engine's precision; with returnBuffer (and nothing to crop) the caller's new buffer.
    const y = resultTarget(batches * qRows, E, userE, 'y');
    const { attention, rowStats } = attentionBuffers(scratch, plan);
    const { probs, probsBytes } = probsBuffer(scratch, plan);
    const { q, kv } = targets;
    if (copies.length > 0) {
      stages.run('copy_inputs', (pass) => {
        for (const c of copies) encodeCopyRows(pass, scratch, c.src, c.dst, c);
      });
    }
    stages.run('qkv_projection', (pass) => encodeQkvProjection(pass, scratch, plan, { query, key, value }, weights.projection, targets, choice.qkv_projection));
    attentionStages(stages, scratch, plan, { q, kv, attention, rowStats, probs }, masks, choice.flash_attention);
    stages.run('output_projection', (pass) =>
      encodeOutputProjection(pass, scratch, plan, { attention, weight: weights.outProjWeight, bias: weights.outProjBias, y }, choice.output_projection),
    );
    return { result: y, rows: batches * qRows, cols: E, keepCols: userE, probs, probsBytes };
  });
}
