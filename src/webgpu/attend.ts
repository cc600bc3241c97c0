// engine.scaledDotProductAttention on the GPU: the attention kernel alone on Q [B, H, Sq, Dh] and
// K, V [B, G, Skv, Dh] given as arrays (uploaded) or as GPU buffers (copied on the GPU, by a compute
// pass, into the call's Q ++ K ++ V scratch: no readback), with the output read back or left in a buffer the caller owns.

import { ShapeMismatchError } from '../errors.ts';
import type { ForwardPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { type BufferPool, Usage } from './buffers.ts';
import { attentionBuffers, probsBuffer, readBack, rejectInvalidBuffers } from './forward.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeCopyRows, encodeCopyTensor } from './kernels/copy-tensor.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { encodeHeadTransform } from './kernels/head-transform.ts';
import { encodeLinearAttention } from './kernels/linear-attention.ts';
import { uploadMasks } from './kernels/masks.ts';
import { qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import { cropColumns } from './padding.ts';
import { PassStages } from './profiler.ts';
import { CallScratch } from './scratch.ts';
import type { AttentionVariant } from './variants.ts';

const WHERE = 'scaledDotProductAttention';

/** `userDh`: the caller's head size, when the plan's heads are padded to Dp lanes (padding.ts). */
export async function attendWebGPU(
  pool: BufferPool,
  plan: ForwardPlan,
  variant: AttentionVariant,
  userDh = plan.layer.headDim,
): Promise<ForwardResult | BufferForwardResult> {
  const device = pool.device;
  const scratch = new CallScratch(pool);
  try {
    const el = scratch.elementBytes;
    const layout = qkvLayout(plan);
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
    const qBytes = B * H * Sq * Dh * el;
    const kvBytes = B * G * Skv * Dh * el;
    const g = plan.gpu;
    if (g) checkSizes(plan, g, el, userDh);
    const qkv = scratch.storage(layout.total * el, 'qkv');
    if (!g?.query) scratch.writeTensorAt(qkv, 0, plan.query);
    if (!g?.key) scratch.writeTensorAt(qkv, layout.kBase, plan.key);
    if (!g?.value) scratch.writeTensorAt(qkv, layout.vBase, plan.value);
    const masks = uploadMasks(scratch, plan);
    const { attention, rowStats } = attentionBuffers(scratch, plan);
    const { probs, probsBytes } = probsBuffer(scratch, plan);
    const { q: qBuffer, kv } = qkvBufferTargets(plan, qkv);
    // A caller's buffer from another device, or of the wrong kind, is a validation error: caught here.
    if (g) device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder({ label: WHERE });
    const stages = new PassStages(device, encoder, WHERE, false);
    // The caller's buffers are read in a compute pass (they need STORAGE usage only), into Q ++ K ++ V.
    if (g) {
      // Padded heads (userDh < Dh): each row of userDh widened to Dh lanes on the way.
      const copy = (src: GPUBuffer, count: number, offset: number) =>
        userDh === Dh
          ? (pass: GPUComputePassEncoder) => encodeCopyTensor(pass, scratch, src, qkv, count, offset)
          : (pass: GPUComputePassEncoder) => encodeCopyRows(pass, scratch, src, qkv, { rows: count / Dh, srcCols: userDh, dstCols: Dh, dstOffset: offset });
      stages.run('copy_inputs', (pass) => {
        if (g.query) copy(g.query, qBytes / el, 0)(pass);
        if (g.key) copy(g.key, kvBytes / el, layout.kBase)(pass);
        if (g.value) copy(g.value, kvBytes / el, layout.vBase)(pass);
      });
    }
    // With rotary, the queries and the last Sq keys turn by their positions first.
    if (plan.layer.rotary) stages.run('head_transform', (pass) => encodeHeadTransform(pass, scratch, plan, { q: qBuffer, kv }));
    if (plan.layer.attention === 'linear') stages.run('linear_attention', (pass) => encodeLinearAttention(pass, scratch, plan, { q: qBuffer, kv, attention }, masks));
    else stages.run('flash_attention', (pass) => encodeFlashAttention(pass, scratch, plan, { q: qBuffer, kv, attention, rowStats }, masks, variant));
    if (probs) stages.run('attention_probs', (pass) => encodeAttentionProbs(pass, scratch, plan, { q: qBuffer, kv, rowStats, probs }, masks));
    const owned = (bytes: number, label: string) =>
      device.createBuffer({ label, size: Math.max(16, Math.ceil(bytes / 4) * 4), usage: Usage.STORAGE | Usage.COPY_SRC | Usage.COPY_DST });
    const rows = B * H * Sq;
    const outputBuffer = plan.returnBuffer ? owned(rows * userDh * el, `${WHERE}.outputBuffer`) : null;
    if (outputBuffer && userDh !== Dh)
      stages.run('crop_output', (pass) => encodeCopyRows(pass, scratch, attention, outputBuffer, { rows, srcCols: Dh, dstCols: userDh }));
    stages.end(scratch);
    if (outputBuffer) {
      // The output (and probabilities) in new buffers the caller owns: no readback.
      if (userDh === Dh) encoder.copyBufferToBuffer(attention, 0, outputBuffer, 0, qBytes);
      const weightsBuffer = probs ? owned(probsBytes, `${WHERE}.attentionWeightsBuffer`) : null;
      if (probs && weightsBuffer) encoder.copyBufferToBuffer(probs, 0, weightsBuffer, 0, probsBytes);
      device.queue.submit([encoder.finish()]);
      await rejectInvalidBuffers(device, !!g, [outputBuffer, weightsBuffer], WHERE);
      return weightsBuffer ? { outputBuffer, attentionWeightsBuffer: weightsBuffer } : { outputBuffer };
    }
    const sources = [{ buffer: attention, bytes: qBytes, f16: el === 2 }, ...(probs ? [{ buffer: probs, bytes: probsBytes }] : [])];
    const reading = readBack(scratch, encoder, sources);
    const [verdict, read] = await Promise.allSettled([rejectInvalidBuffers(device, !!g, [], WHERE), reading]);
    if (verdict.status === 'rejected') throw verdict.reason;
    if (read.status === 'rejected') throw read.reason;
    const [padded, attentionWeights] = read.value;
    const output = cropColumns(padded, rows, Dh, userDh);
    return attentionWeights ? { output, attentionWeights } : { output };
  } finally {
    scratch.releaseAll();
  }
}

/** GPU-resident Q, K, V must hold their tensors at the engine's precision (4 bytes an element, or 2 with f16). */
function checkSizes(plan: ForwardPlan, g: NonNullable<ForwardPlan['gpu']>, el: number, Dh: number): void {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const { numHeads: H, numKvHeads: G } = plan.layer;
  const type = el === 2 ? "float16 (the engine's precision is f16)" : 'float32';
  for (const [argument, buffer, shape, n] of [
    ['query', g.query, `[B, H, Sq, Dh] = [${B}, ${H}, ${Sq}, ${Dh}]`, B * H * Sq * Dh],
    ['key', g.key, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}]`, B * G * Skv * Dh],
    ['value', g.value, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}]`, B * G * Skv * Dh],
  ] as const) {
    if (buffer && buffer.size < n * el) {
      throw new ShapeMismatchError({ where: WHERE, argument, expected: `a GPUBuffer of at least ${n * el} bytes (${shape} ${type})`, given: `${buffer.size} bytes` });
    }
  }
}
