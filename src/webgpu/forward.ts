// One forward on the GPU, its kernel variants already chosen, encoded as it reads: a GpuCall (call.ts)
// opens the call's error scopes and command encoder; the inputs go in, and each stage (QKV projection →
// head transform → attention → output projection, and the probabilities when asked) is encoded into the
// pass `call.stage(name)` returns, in order; `call.finish` submits and reads the output back. attend.ts
// encodes the attention part alone (encodeAttention). Nothing here chooses variants or compiles ahead:
// the caller passes the choice (tuning/scheduler.ts).

import { encodeOutputGate } from './kernels/output-gate.ts';
import type { ForwardPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import type { BufferPool } from './buffers.ts';
import { type CallOutput, checkBufferSizes, GpuCall } from './call.ts';
import { encodeActivationsQ8 } from './kernels/activations-q8.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeCopyRows } from './kernels/copy-tensor.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { encodeHeadTransform } from './kernels/head-transform.ts';
import { encodeLinearAttention } from './kernels/linear-attention.ts';
import { type MaskBuffers, uploadMasks } from './kernels/masks.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import type { KvFormat } from './kernels/attention-fields.ts';
import { encodeKvStore } from './kernels/kv-store.ts';
import { encodeQkvProjection, type KvTarget, type QkvTargets, qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import type { Unpadded } from './padding.ts';
import type { CallScratch } from './scratch.ts';
import type { Verdict } from './scopes.ts';
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
  /** Elements from the start of the buffer to V (q-dtypes: values, as the kernels index them). */
  vBase: number;
  /** How it is stored when not as the engine's tensors (attention-fields.ts KvFormat): the projection then writes the call's rows to scratch, and kv-store.ts stores them. */
  format?: KvFormat;
  /** q8_0/q4_0: the word where the block scales start. */
  scales?: number;
  /** Whether WebGPU accepted the cache's allocation and its last write (kv-cache.ts): a call reading it awaits them. */
  after: readonly Verdict[];
}

/**
 * The attention part of a call, shared by forward and scaledDotProductAttention: the head transform
 * (rotary, QK-norm) where the layer has one, the attention kernel (flash, or linear), and the
 * probabilities with needWeights.
 */
export function encodeAttention(
  call: GpuCall,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: QkvTargets['kv']; attention: GPUBuffer; rowStats: GPUBuffer; probs: GPUBuffer | null; cache?: KvTarget & { format: KvFormat } },
  masks: MaskBuffers,
  variant: AttentionVariant,
): void {
  const { scratch } = call;
  const { q, attention, rowStats, probs } = buffers;
  if (plan.layer.rotary || plan.layer.qkNorm || plan.layer.vNorm) encodeHeadTransform(call.stage('head_transform'), scratch, plan, { q, kv: buffers.kv });
  // A cache kept as another type: the new rows (in the scratch kv) stored into it, then read there.
  const kv = buffers.cache ? encodeKvStore(call.stage('kv_store'), scratch, plan, buffers.kv, buffers.cache) : buffers.kv;
  if (plan.layer.attention === 'linear') encodeLinearAttention(call.stage('linear_attention'), scratch, plan, { q, kv, attention }, masks);
  else encodeFlashAttention(call.stage('flash_attention'), scratch, plan, { q, kv, attention, rowStats }, masks, variant);
  if (probs) encodeAttentionProbs(call.stage('attention_probs'), scratch, plan, { q, kv, rowStats, probs }, masks);
}

/**
 * Runs one planned forward on the GPU and reads the output [B, Sq, E] (and P [B, H, Sq, Skv] if asked)
 * back, or leaves them in new buffers (returnBuffer). `unpadded`: the caller's sizes when the plan's
 * layer is padded (padding.ts), else null. Rejects with WebGPUCallError when WebGPU refused the work,
 * or the layer's weight upload or the cache's last write (call.ts).
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
  const after = cache ? [weights.verdict, ...cache.after] : [weights.verdict];
  const call = new GpuCall(pool, { where: WHERE, callerBuffers: g !== null, returnBuffer: plan.returnBuffer, profile, after });
  const { scratch } = call;
  let out: CallOutput;
  try {
    // Inputs: the caller's GPUBuffers where given (read in place, or copied to padded rows), else
    // uploads of the arrays (at the engine's precision).
    const input = (buffer: GPUBuffer, rows: number, cols: number, colsTo: number, role: string): GPUBuffer => {
      if (cols === colsTo) return buffer;
      const dst = scratch.storage(rows * colsTo * scratch.elementBytes, role);
      encodeCopyRows(call.stage('copy_inputs'), scratch, buffer, dst, { rows, srcCols: cols, dstCols: colsTo });
      return dst;
    };
    const { kdim, vdim } = plan.layer;
    const query = g?.query ? input(g.query, batches * qRows, userE, E, 'query') : scratch.tensor(plan.query, 'query'); // [B, Sq, E]
    const key = plan.mode !== 'cross' ? query : g?.key ? input(g.key, batches * kvRows, unpadded?.kdim ?? kdim, kdim, 'key') : scratch.tensor(plan.key, 'key'); // [B, Skv, kdim]
    let value = query; // [B, Skv, vdim]
    if (plan.mode === 'cross') {
      if (g?.value) value = input(g.value, batches * kvRows, unpadded?.vdim ?? vdim, vdim, 'value');
      else if (plan.value === plan.key && !g?.key)
        value = key; // one array for both: one upload
      else value = scratch.tensor(plan.value, 'value');
    }
    const { numHeads: H, headDim: Dh } = plan.layer;
    // Q ++ K ++ V head-split in one scratch buffer; with a KV cache, Q alone, and K, V in the cache
    // (a cache kept as another type: K, V [B, G, Sq, Dh] in scratch, stored into it after the head transform).
    const cacheKv: KvTarget | null =
      cache && plan.cache
        ? { buffer: cache.buffer, kBase: 0, vBase: cache.vBase, stride: cache.capacity, row0: plan.cache.start, format: cache.format, scales: cache.scales }
        : null;
    const rows = plan.batchSize * plan.seqLen * Dh;
    const stored = cacheKv?.format ? { ...cacheKv, format: cacheKv.format } : undefined;
    const targets: QkvTargets = cacheKv
      ? {
          q: scratch.storage(rows * H * scratch.elementBytes, 'q'),
          kv: stored
            ? {
                buffer: scratch.storage(2 * rows * plan.layer.numKvHeads * scratch.elementBytes, 'newKv'),
                kBase: 0,
                vBase: rows * plan.layer.numKvHeads,
                stride: plan.seqLen,
                row0: 0,
              }
            : cacheKv,
        }
      : qkvBufferTargets(plan, scratch.storage(qkvLayout(plan).total * scratch.elementBytes, 'qkv'));
    const masks = uploadMasks(scratch, plan);
    // Y [B, Sq, E] at the engine's precision; with returnBuffer (and nothing to crop) the caller's new buffer.
    const y = call.resultTarget(batches * qRows, E, userE, 'y');
    const { attention, rowStats } = attentionBuffers(scratch, plan);
    const { probs, probsBytes } = probsBuffer(scratch, plan);
    const { q, kv } = targets;
    // config.activations 'q8': the projections with quantized weights read their inputs rounded as ggml's Q8_0 (activations-q8.ts).
    let inputs = { query, key, value };
    if (weights.q8?.qkv) {
      const round = (x: GPUBuffer, rows: number, K: number, ld: number, role: string) =>
        encodeActivationsQ8(call.stage('activations_q8'), scratch, x, { rows, K, ld }, role);
      const q8Query = round(query, batches * qRows, userE, E, 'queryQ8');
      const q8Key = key === query ? q8Query : round(key, batches * kvRows, unpadded?.kdim ?? kdim, kdim, 'keyQ8');
      inputs = {
        query: q8Query,
        key: q8Key,
        value: value === query ? q8Query : value === key ? q8Key : round(value, batches * kvRows, unpadded?.vdim ?? vdim, vdim, 'valueQ8'),
      };
    }
    encodeQkvProjection(call.stage('qkv_projection'), scratch, plan, inputs, weights.projection, targets, choice.qkv_projection);
    encodeAttention(call, plan, { q, kv, attention, rowStats, probs, cache: stored }, masks, choice.flash_attention);
    if (weights.gate) encodeOutputGate(call.stage('output_gate'), scratch, plan, { attention, query, gate: weights.gate }); // config.outputGate
    const heads = { batches, S: qRows, heads: H, Dh, uDh: unpadded?.headDim ?? Dh };
    const output = {
      attention: weights.q8?.out ? encodeActivationsQ8(call.stage('activations_q8'), scratch, attention, heads, 'attentionQ8') : attention,
      weight: weights.outProjWeight,
      bias: weights.outProjBias,
      y,
    };
    encodeOutputProjection(call.stage('output_projection'), scratch, plan, output, choice.output_projection);
    out = { result: y, rows: batches * qRows, cols: E, keepCols: userE, probs, probsBytes };
  } catch (e) {
    return call.fail(e);
  }
  return call.finish(out);
}
