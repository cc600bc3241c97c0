// engine.scaledDotProductAttention (and linearAttention) on the GPU: the attention part of a forward
// alone (forward.ts encodeAttention) on Q [B, H, Sq, Dh] and K, V [B, G, Skv, Dh] given as arrays
// (uploaded) or as GPU buffers (copied on the GPU, by a compute pass, into the call's Q ++ K ++ V
// scratch), in one GpuCall (call.ts): submitted and read back, or left in buffers the caller owns.

import type { ForwardPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import type { BufferPool } from './buffers.ts';
import { type CallOutput, checkBufferSizes, GpuCall } from './call.ts';
import { attentionBuffers, encodeAttention, probsBuffer } from './forward.ts';
import { encodeCopyRows, encodeCopyTensor } from './kernels/copy-tensor.ts';
import { uploadMasks } from './kernels/masks.ts';
import { qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import type { AttentionVariant } from './variants.ts';

/** `userDh`: the caller's head size, when the plan's heads are padded to Dp lanes (padding.ts). */
export function attendWebGPU(pool: BufferPool, plan: ForwardPlan, variant: AttentionVariant, userDh = plan.layer.headDim): Promise<ForwardResult | BufferForwardResult> {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const WHERE = plan.layer.attention === 'linear' ? 'linearAttention' : 'scaledDotProductAttention';
  const g = plan.gpu;
  if (g) {
    checkBufferSizes(WHERE, pool.elementBytes, [
      ['query', g.query, `[B, H, Sq, Dh] = [${B}, ${H}, ${Sq}, ${userDh}]`, B * H * Sq * userDh],
      ['key', g.key, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${userDh}]`, B * G * Skv * userDh],
      ['value', g.value, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${userDh}]`, B * G * Skv * userDh],
    ]);
  }
  const call = new GpuCall(pool, { where: WHERE, callerBuffers: g !== null, returnBuffer: plan.returnBuffer, profile: false, after: [] });
  const { scratch } = call;
  let out: CallOutput;
  try {
    const el = scratch.elementBytes;
    const layout = qkvLayout(plan);
    const qkv = scratch.storage(layout.total * el, 'qkv'); // Q [B, H, Sq, Dp] ++ K, V [B, G, Skv, Dp]
    if (!g?.query) scratch.writeTensorAt(qkv, 0, plan.query);
    if (!g?.key) scratch.writeTensorAt(qkv, layout.kBase, plan.key);
    if (!g?.value) scratch.writeTensorAt(qkv, layout.vBase, plan.value);
    const masks = uploadMasks(scratch, plan);
    const { attention, rowStats } = attentionBuffers(scratch, plan);
    const { probs, probsBytes } = probsBuffer(scratch, plan);
    const { q, kv } = qkvBufferTargets(plan, qkv);
    // The caller's buffers are read in a compute pass (they need STORAGE usage only), into Q ++ K ++ V;
    // padded heads (userDh < Dh): each row of userDh widened to Dh lanes on the way.
    const copy = (src: GPUBuffer | null | undefined, count: number, offset: number) => {
      if (!src) return;
      if (userDh === Dh) encodeCopyTensor(call.stage('copy_inputs'), scratch, src, qkv, count, offset);
      else encodeCopyRows(call.stage('copy_inputs'), scratch, src, qkv, { rows: count / Dh, srcCols: userDh, dstCols: Dh, dstOffset: offset });
    };
    copy(g?.query, B * H * Sq * Dh, 0);
    copy(g?.key, B * G * Skv * Dh, layout.kBase);
    copy(g?.value, B * G * Skv * Dh, layout.vBase);
    // With rotary, the queries and the last Sq keys turn by their positions first.
    encodeAttention(call, plan, { q, kv, attention, rowStats, probs }, masks, variant);
    out = { result: attention, rows: B * H * Sq, cols: Dh, keepCols: userDh, probs, probsBytes };
  } catch (e) {
    return call.fail(e);
  }
  return call.finish(out);
}
