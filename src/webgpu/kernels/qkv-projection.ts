// Host side of shaders/qkv_projection.wgsl (+ the GEMM core of the chosen variant, variants.ts):
// X · W_inᵀ + b_in → Q [B, H, Sq, Dh] ++ K, V [B, G, Skv, Dh].
// Self-attention (and varlen batches) is one dispatch over all (H + 2G)·Dh columns; cross-attention
// projects the query, the key and the value with their own dispatches (K and V share one when key
// and value are the same array).

import source from '../../../shaders/qkv_projection.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { ProjectionVariant } from '../../types.ts';
import type { Precision } from '../buffers.ts';
import { encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, omit } from '../shader.ts';
import { ATTENTION_FIELDS, attentionFields, type KvFormat } from './attention-fields.ts';
import { type GpuWeight, type WeightFormat, weightEntries } from './packed-weight.ts';
import { GEMM_FIELDS, projectionBindings, projectionKernel, projectionSpecialisation } from './projection.ts';

/** qkv_projection.wgsl's uniforms. */
export const QKV_PARAMS = defineParams([
  ...GEMM_FIELDS,
  ['K4', 'u32', 'K / 4'],
  ['S', 'u32', 'sequence length of X (and of the Q, K or V it writes)'],
  ...omit(ATTENTION_FIELDS, 'Sq', 'Skv'), // where the heads go (kBase4, vBase4, kvStride: in the kv target)
  ['slot0', 'u32', "head slot of this dispatch's first column (0: Q, H: K, H + G: V)"],
  ['wRow0', 'u32', "row of W holding this dispatch's first column"],
  ['kvRow0', 'u32', "row of the block the first token goes to: 0, or the cache's length"],
]);

const BINDINGS = projectionBindings('QkvProjection', ['x', 'X [M, K/4]'], 'W [·, K/4]', 'b [(H + 2·G)·Dh / 4]', [
  'qkv',
  'Q ++ K ++ V (qkv_projection.wgsl says where each goes)',
]);
/** qkv_projection.wgsl's bindings (the GEMM cores read x and w, and write through the problem file's store). */
export const QKV_BINDINGS = BINDINGS.float;
/** The same with packed weights (packed-weight.ts): quants and scaleOffset in place of w. */
export const QKV_PACKED_BINDINGS = BINDINGS.packed;

/** Where Q, K and V sit in the qkv buffer (Q, then K, then V), in elements. */
export function qkvLayout(plan: ForwardPlan): { kBase: number; vBase: number; total: number } {
  const { batches, qRows, kvRows } = plan.geometry;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const kBase = batches * H * qRows * Dh;
  const vBase = kBase + batches * G * kvRows * Dh;
  return { kBase, vBase, total: vBase + batches * G * kvRows * Dh };
}

/** Where K and V go and are read from: a buffer holding K then V, [B, G, stride, Dh] each (in floats). */
export interface KvTarget {
  buffer: GPUBuffer;
  kBase: number;
  vBase: number;
  /** Rows per (b, g) block: Skv, or a KV cache's maxSeqLen. */
  stride: number;
  /** First row written by this call: 0, or the cache's length. */
  row0: number;
  /** How K and V are stored when not as the engine's ST4 (a KV cache of another dtype: attention-fields.ts KvFormat); the projection never writes such a target. */
  format?: KvFormat;
  /** q8_0/q4_0: the word where the block scales start. */
  scales?: number;
}

/** Where the projection writes: Q (and, without a cache, K and V) into `q`; K and V into `kv`. */
export interface QkvTargets {
  q: GPUBuffer;
  kv: KvTarget;
}

/** Targets for a plan without a KV cache: Q, K, V back to back in one buffer (qkvLayout). */
export function qkvBufferTargets(plan: ForwardPlan, qkv: GPUBuffer): QkvTargets {
  const layout = qkvLayout(plan);
  return { q: qkv, kv: { buffer: qkv, kBase: layout.kBase, vBase: layout.vBase, stride: plan.geometry.kvRows, row0: 0 } };
}

/**
 * The layer's projection weights on the GPU: in_proj_weight [(H+2G)·Dh, E], or q, k, v apart (kdim/vdim ≠ E,
 * or quantized separately, each of its own type). Each is a float buffer or packed (packed-weight.ts).
 */
export type ProjectionWeights = { inProj: GpuWeight; bias: GPUBuffer } | { q: GpuWeight; k: GpuWeight; v: GpuWeight; bias: GPUBuffer };

/** The input activations on the GPU: query, and for cross-attention key and value (the same buffer when the same array). */
export interface ProjectionInputs {
  query: GPUBuffer;
  key: GPUBuffer;
  value: GPUBuffer;
}

interface Part {
  x: GPUBuffer;
  out: GPUBuffer; // Q's buffer for Q columns, K/V's for K and V columns
  weight: GpuWeight;
  rows: number; // S of this input
  inDim: number; // K
  slot0: number; // first head slot written
  slots: number; // head slots written
  wRow0: number; // first row of `weight` used
}

/** One dispatch: a part of the projection (Part), with the plan, the bias, where K and V go, the variant and the rows computed. */
interface QkvArgs extends Part {
  plan: ForwardPlan;
  bias: GPUBuffer;
  kv: KvTarget;
  variant: ProjectionVariant;
  rowLimit: number;
}

/** The QKV projection as a kernel (kernel.ts): one dispatch per part (Q, K, V, or several together). */
export const QKV_PROJECTION = projectionKernel({
  name: 'QkvProjection',
  source,
  params: QKV_PARAMS,
  bindings: BINDINGS,
  run(args: QkvArgs, scratch) {
    const { numHeads: H, numKvHeads: G, headDim: Dh } = args.plan.layer;
    const { kv } = args;
    const el = scratch.elementBytes;
    const M = args.plan.geometry.batches * args.rows;
    const N = args.slots * Dh;
    return {
      M,
      N,
      uniforms: {
        K4: args.inDim / 4,
        S: args.rows,
        ...attentionFields(args.plan, kv),
        slot0: args.slot0,
        wRow0: args.wRow0,
        kvRow0: kv.row0,
      },
      buffers: {
        x: { buffer: args.x, size: M * args.inDim * el }, // X [B·S, K]
        ...weightEntries(args.weight), // W [·, K]: w, or quants [·, wordsPerRow] and scaleOffset [·, groups]
        bias: { buffer: args.bias, size: (H + 2 * G) * Dh * el }, // b [(H+2G)·Dh]
        qkv: args.out,
      },
    };
  },
});

/** The pipeline of `variant` at this precision, for float weights or packed ones of `format` (built once per key). */
export function qkvProjectionPipeline(precision: Precision, variant: ProjectionVariant, format: WeightFormat | null = null): PipelineSpec {
  return kernelSpec(QKV_PROJECTION, precision, projectionSpecialisation(variant, format));
}

export function encodeQkvProjection(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  inputs: ProjectionInputs,
  weights: ProjectionWeights,
  targets: QkvTargets,
  variant: ProjectionVariant,
  /** The tuner's timing trials: compute only the first `rowLimit` token rows (the rest of the output is left as it was). */
  rowLimit = Infinity,
): void {
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = plan.layer;
  const { qRows, kvRows } = plan.geometry;
  const w = (part: 'q' | 'k' | 'v') => ('inProj' in weights ? weights.inProj : weights[part]);
  const row0 = (slot0: number) => ('inProj' in weights ? slot0 * Dh : 0);
  const { q: qOut, kv } = targets;
  const apart = !('inProj' in weights);
  const parts: Part[] =
    apart && plan.mode !== 'cross'
      ? [
          // q, k, v apart (each of its own type) in a self-attention layer: a dispatch each, from the query;
          // K and V into the cache when there is one
          { x: inputs.query, out: qOut, weight: w('q'), rows: qRows, inDim: E, slot0: 0, slots: H, wRow0: 0 },
          { x: inputs.query, out: kv.buffer, weight: w('k'), rows: qRows, inDim: E, slot0: H, slots: G, wRow0: 0 },
          { x: inputs.query, out: kv.buffer, weight: w('v'), rows: qRows, inDim: E, slot0: H + G, slots: G, wRow0: 0 },
        ]
      : plan.cache
        ? [
            // a KV cache: Q to its own buffer; the new tokens' K and V (from the query) into the cache
            { x: inputs.query, out: qOut, weight: w('q'), rows: qRows, inDim: E, slot0: 0, slots: H, wRow0: 0 },
            { x: inputs.query, out: kv.buffer, weight: w('k'), rows: qRows, inDim: E, slot0: H, slots: 2 * G, wRow0: row0(H) },
          ]
        : plan.mode !== 'cross'
          ? [{ x: inputs.query, out: qOut, weight: w('q'), rows: qRows, inDim: E, slot0: 0, slots: H + 2 * G, wRow0: 0 }]
          : [
              { x: inputs.query, out: qOut, weight: w('q'), rows: qRows, inDim: E, slot0: 0, slots: H, wRow0: 0 },
              ...(inputs.key === inputs.value && 'inProj' in weights
                ? [{ x: inputs.key, out: kv.buffer, weight: w('k'), rows: kvRows, inDim: kdim, slot0: H, slots: 2 * G, wRow0: row0(H) }]
                : [
                    { x: inputs.key, out: kv.buffer, weight: w('k'), rows: kvRows, inDim: kdim, slot0: H, slots: G, wRow0: row0(H) },
                    { x: inputs.value, out: kv.buffer, weight: w('v'), rows: kvRows, inDim: vdim, slot0: H + G, slots: G, wRow0: row0(H + G) },
                  ]),
            ];
  for (const part of parts) encodeKernel(pass, scratch, QKV_PROJECTION, { ...part, plan, bias: weights.bias, kv, variant, rowLimit });
}
