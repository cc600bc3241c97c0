// Host side of shaders/head_transform.wgsl: QK-norm and rotary embeddings of the query heads and the
// key heads of a call, in place, between the QKV projection and attention, and the weightless RMS norm
// of the value heads. Only for layers with config.rotary, config.qkNorm or config.vNorm.

import source from '../../../shaders/head_transform.wgsl?raw';
import { type ForwardPlan, rotaryAngle } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';
import type { QkvTargets } from './qkv-projection.ts';

/** head_transform.wgsl's uniforms. */
export const TRANSFORM_PARAMS = defineParams([
  ['rows', 'u32', 'tokens transformed (the rope table has as many rows)'],
  ['S', 'u32', 'tokens per batch'],
  ['heads', 'u32', 'heads of this kind: H (queries) or G (keys)'],
  ['base4', 'u32', 'where these heads start in their buffer, in vec4s'],
  ['stride', 'u32', 'rows per (batch, head) block'],
  ['row0', 'u32', "the block's row of the first token: 0, or a KV cache's length"],
  ['phase', 'u32', "1: write each token's tokenScale (qkNorm over 'all'), one invocation per token; 0: transform"],
  ['normMode', 'u32', '0: no norm; 1: RMS norm of each head with normWeight; 2: tokenScale[m] with normWeight'],
  ['normOffset', 'u32', "where this kind's weights start in normWeight"],
  ['normHeadStride', 'u32', "0: every head the same weights; Dh (lanes): head h's at normOffset + h·Dh (over 'all')"],
  ['normDim', 'u32', "features of a head the RMS mean runs over: the caller's Dh (≤ the lanes, DH4·4)"],
  ['eps', 'f32', 'RMS norm epsilon'],
  ['pairs', 'u32', 'rotary: dim / 2 pairs rotated; 0: no rotary'],
  ['interleaved', 'u32', '1: pairs (2i, 2i + 1); 0: halves (i, i + dim/2)'],
]);

/** head_transform.wgsl's bindings. */
export const TRANSFORM_BINDINGS = kernelBindings('HeadTransform', [
  ['heads', 'storage', 'array<ST4>', 'the query or key heads, transformed in place [B, heads, stride, Dh/4]'],
  ['normWeight', 'read-only-storage', 'array<f32>', "QK-norm weights: query [Dh] ++ key [Dh] (over 'all': [H·Dh] ++ [G·Dh]), then ones [Dh] (V-norm)"],
  ['rope', 'read-only-storage', 'array<f32>', 'cos [rows, pairs] ++ sin [rows, pairs]'],
  ['tokenScale', 'storage', 'array<f32>', "each token's RMS scale over all its heads [rows] (qkNorm over 'all')"],
]);

/** The heads of one kind transformed by a dispatch: the query heads, or the key heads (where they are, and which tokens). */
interface HeadKind {
  buffer: GPUBuffer;
  heads: number;
  base4: number;
  S: number;
  stride: number;
  row0: number;
  /** 0: none; 1: per head; 2: by tokenScale (over 'all'). */
  normMode: number;
  normOffset: number;
  normHeadStride: number;
  eps: number;
  /** Whether rotary turns these heads (not the value heads). */
  rotate: boolean;
}

/** One dispatch: the plan, the kind of heads, the QK-norm weights and the rope table. */
interface TransformArgs {
  plan: ForwardPlan;
  kind: HeadKind;
  normWeight: GPUBuffer;
  rope: GPUBuffer;
  tokenScale: GPUBuffer;
  /** 1: the token-scale pass before a normMode 2 transform; 0: the transform. */
  phase: number;
}

/** The head transform as a kernel (kernel.ts): an invocation per (token, head), specialised by the head size. */
export const HEAD_TRANSFORM = defineKernel({
  name: 'HeadTransform',
  params: TRANSFORM_PARAMS,
  specialise: (args: TransformArgs) => ({ headDim: args.plan.layer.headDim }),
  bindings: () => TRANSFORM_BINDINGS,
  shader: (s) => ({ sizes: { DH4: s.headDim / 4 }, sources: [source] }),
  run({ plan, kind: k, normWeight, rope, tokenScale, phase }) {
    const { rotary, qkNorm } = plan.layer;
    const rows = plan.geometry.batches * k.S;
    return {
      uniforms: {
        rows,
        S: k.S,
        heads: k.heads,
        base4: k.base4,
        stride: k.stride,
        row0: k.row0,
        phase,
        normMode: k.normMode,
        normOffset: k.normOffset,
        normHeadStride: k.normHeadStride,
        normDim: qkNorm?.dim ?? plan.layer.unpaddedHeadDim ?? plan.layer.headDim,
        eps: k.eps,
        pairs: rotary && k.rotate ? rotary.dim / 2 : 0,
        interleaved: rotary?.interleaved ? 1 : 0,
      },
      buffers: { heads: k.buffer, normWeight, rope, tokenScale },
      groups: [Math.ceil(rows / 64), phase === 1 ? 1 : k.heads],
    };
  },
});

export function headTransformPipeline(precision: Precision, headDim: number): PipelineSpec {
  return kernelSpec(HEAD_TRANSFORM, precision, { headDim });
}

/** Each query token's cos and sin of position·θ_i, [tokens, dim/2] then [tokens, dim/2], float64 on the host, stored f32. */
function ropeTable(plan: ForwardPlan): Float32Array {
  const rotary = plan.layer.rotary!;
  const pairs = rotary.dim / 2;
  const positions = plan.positions!;
  const out = new Float32Array(2 * positions.length * pairs);
  positions.forEach((position, m) => {
    for (let i = 0; i < pairs; i++) {
      const [c, s] = rotaryAngle(rotary, position, i);
      out[m * pairs + i] = c;
      out[(positions.length + m) * pairs + i] = s;
    }
  });
  return out;
}

export function encodeHeadTransform(pass: GPUComputePassEncoder, scratch: CallScratch, plan: ForwardPlan, targets: QkvTargets): void {
  const { numHeads: H, numKvHeads: G, headDim: Dh, rotary, qkNorm, vNorm } = plan.layer;
  const { qRows, kvRows } = plan.geometry;
  const device = scratch.device;
  const upload = (data: Float32Array, role: string) => {
    const buffer = scratch.storage(Math.max(16, data.byteLength), role);
    device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
    return buffer;
  };
  // Weights: the query's, the key's (QK-norm), then Dh ones (V-norm's weightless norm).
  const qLength = qkNorm?.query.length ?? 0;
  const kLength = qkNorm?.key.length ?? 0;
  const weights = new Float32Array(qLength + kLength + (vNorm ? Dh : 0));
  if (qkNorm) weights.set(qkNorm.query, 0);
  if (qkNorm) weights.set(qkNorm.key, qLength);
  weights.fill(1, qLength + kLength);
  const normWeight = upload(weights, 'HeadTransform.normWeight');
  const rope = upload(rotary ? ropeTable(plan) : new Float32Array(4), 'HeadTransform.rope');
  const { kv } = targets;
  // With a KV cache, and with rotary, the keys transformed are the query tokens' own (same count, same
  // positions): a cache's new rows, or scaledDotProductAttention's last Sq keys. Otherwise all keys
  // (cross-attention with QK-norm: kvRows of its own). Values: the same rows as the keys.
  const ownKeys = plan.cache !== null || rotary !== null;
  const kvS = ownKeys ? qRows : kvRows;
  const kvRow0 = kv.row0 + (ownKeys && !plan.cache ? kvRows - qRows : 0);
  const all = qkNorm?.over === 'all';
  const normMode = qkNorm ? (all ? 2 : 1) : 0;
  const qk = { normMode, normHeadStride: all ? Dh : 0, eps: qkNorm?.eps ?? 1e-6, rotate: true };
  const kinds: HeadKind[] = [];
  if (rotary || qkNorm) {
    kinds.push({ buffer: targets.q, heads: H, base4: 0, S: qRows, stride: qRows, row0: 0, ...qk, normOffset: 0 });
    kinds.push({ buffer: kv.buffer, heads: G, base4: kv.kBase / 4, S: kvS, stride: kv.stride, row0: kvRow0, ...qk, normOffset: qLength });
  }
  if (vNorm) {
    kinds.push({
      buffer: kv.buffer,
      heads: G,
      base4: kv.vBase / 4,
      S: plan.cache ? qRows : kvRows, // a cache's new rows; else every value (rotary or not)
      stride: kv.stride,
      row0: kv.row0,
      normMode: 1,
      normOffset: qLength + kLength,
      normHeadStride: 0,
      eps: vNorm.eps,
      rotate: false,
    });
  }
  let tokenScale: GPUBuffer | null = null;
  for (const kind of kinds) {
    if (kind.normMode === 2) {
      tokenScale = scratch.storage(4 * Math.max(4, plan.geometry.batches * kind.S), 'HeadTransform.tokenScale');
      encodeKernel(pass, scratch, HEAD_TRANSFORM, { plan, kind, normWeight, rope, tokenScale, phase: 1 });
    }
    tokenScale ??= scratch.storage(16, 'HeadTransform.tokenScale');
    encodeKernel(pass, scratch, HEAD_TRANSFORM, { plan, kind, normWeight, rope, tokenScale, phase: 0 });
  }
}
