// Host side of shaders/head_transform.wgsl: QK-norm and rotary embeddings of the query heads and the
// key heads of a call, in place, between the QKV projection and attention, and the weightless RMS norm
// of its value heads (config.vNorm: the same shader, weights of 1, no rotary). Only for layers with
// config.rotary, config.qkNorm or config.vNorm.

import source from '../../../shaders/head_transform.wgsl?raw';
import { type ForwardPlan, rotaryAngles } from '../../plan/index.ts';
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
  ['hasNorm', 'u32', '1: RMS norm with normWeight'],
  ['normOffset', 'u32', "0: the query weights; the query weights' length: the key weights"],
  ['normStride', 'u32', "0: every head's weights the same [Dh]; Dh: head h's at normOffset + h·Dh (qkNorm.over 'all')"],
  ['normAll', 'u32', "1: one RMS norm over all the token's heads (qkNorm.over 'all'), an invocation per token"],
  ['normDim', 'u32', "features the RMS mean runs over: the caller's Dh (≤ the lanes, DH4·4), or heads·Dh with normAll"],
  ['eps', 'f32', 'RMS norm epsilon'],
  ['pairs', 'u32', 'rotary: dim / 2 pairs rotated; 0: no rotary'],
  ['interleaved', 'u32', '1: pairs (2i, 2i + 1); 0: halves (i, i + dim/2)'],
]);

/** head_transform.wgsl's bindings. */
export const TRANSFORM_BINDINGS = kernelBindings('HeadTransform', [
  ['heads', 'storage', 'array<ST4>', 'the query or key heads, transformed in place [B, heads, stride, Dh/4]'],
  ['normWeight', 'read-only-storage', 'array<f32>', "QK-norm weights: query [Dh] ++ key [Dh], or [H·Dh] ++ [G·Dh] (over 'all')"],
  ['rope', 'read-only-storage', 'array<f32>', 'cos [rows, pairs] ++ sin [rows, pairs]'],
]);

/** The heads of one kind transformed by a dispatch: the query heads, or the key heads (where they are, and which tokens). */
interface HeadKind {
  buffer: GPUBuffer;
  heads: number;
  base4: number;
  S: number;
  stride: number;
  row0: number;
  normOffset: number;
  /** The value heads (config.vNorm): a weightless RMS norm (weights of 1 at normOffset), no rotary. */
  value?: boolean;
}

/** One dispatch: the plan, the kind of heads, the QK-norm weights and the rope table. */
interface TransformArgs {
  plan: ForwardPlan;
  kind: HeadKind;
  normWeight: GPUBuffer;
  rope: GPUBuffer;
}

/** The head transform as a kernel (kernel.ts): an invocation per (token, head), specialised by the head size. */
export const HEAD_TRANSFORM = defineKernel({
  name: 'HeadTransform',
  params: TRANSFORM_PARAMS,
  specialise: (args: TransformArgs) => ({ headDim: args.plan.layer.headDim }),
  bindings: () => TRANSFORM_BINDINGS,
  shader: (s) => ({ sizes: { DH4: s.headDim / 4 }, sources: [source] }),
  run({ plan, kind: k, normWeight, rope }) {
    const { headDim: Dh, rotary, qkNorm, vNorm } = plan.layer;
    const rows = plan.geometry.batches * k.S;
    if (k.value) {
      return {
        uniforms: {
          rows,
          S: k.S,
          heads: k.heads,
          base4: k.base4,
          stride: k.stride,
          row0: k.row0,
          hasNorm: 1,
          normOffset: k.normOffset,
          normStride: 0,
          normAll: 0,
          normDim: vNorm?.dim ?? Dh,
          eps: vNorm?.eps ?? 1e-6,
          pairs: 0,
          interleaved: 0,
        },
        buffers: { heads: k.buffer, normWeight, rope },
        groups: [Math.ceil(rows / 64), k.heads],
      };
    }
    const all = qkNorm?.over === 'all';
    return {
      uniforms: {
        rows,
        S: k.S,
        heads: k.heads,
        base4: k.base4,
        stride: k.stride,
        row0: k.row0,
        hasNorm: qkNorm ? 1 : 0,
        normOffset: k.normOffset,
        normStride: all ? Dh : 0,
        normAll: all ? 1 : 0,
        normDim: (qkNorm?.dim ?? Dh) * (all ? k.heads : 1),
        eps: qkNorm?.eps ?? 1e-6,
        pairs: rotary ? rotary.dim / 2 : 0,
        interleaved: rotary?.interleaved ? 1 : 0,
      },
      buffers: { heads: k.buffer, normWeight, rope },
      groups: [Math.ceil(rows / 64), all ? 1 : k.heads],
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
  const angles = new Float64Array(rotary.dim);
  positions.forEach((position, m) => {
    rotaryAngles(rotary, position, angles);
    for (let i = 0; i < pairs; i++) {
      out[m * pairs + i] = angles[2 * i];
      out[(positions.length + m) * pairs + i] = angles[2 * i + 1];
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
  // query ++ key (config.qkNorm), then Dh ones: vNorm's weightless norm (padded lanes hold zeros either way).
  const qkWeights = qkNorm ? [...qkNorm.query, ...qkNorm.key] : [];
  const normWeight = upload(
    Float32Array.from([...qkWeights, ...(vNorm ? new Array<number>(Dh).fill(1) : [])], (w) => w),
    'HeadTransform.normWeight',
  );
  const rope = upload(rotary ? ropeTable(plan) : new Float32Array(4), 'HeadTransform.rope');
  const { kv } = targets;
  // With a KV cache, and with rotary, the keys transformed are the query tokens' own (same count, same
  // positions): a cache's new rows, or scaledDotProductAttention's last Sq keys. Otherwise all keys
  // (cross-attention with QK-norm: kvRows of its own).
  const ownKeys = plan.cache !== null || rotary !== null;
  const kinds: HeadKind[] = [];
  if (rotary || qkNorm) kinds.push({ buffer: targets.q, heads: H, base4: 0, S: qRows, stride: qRows, row0: 0, normOffset: 0 });
  if (rotary || qkNorm) {
    kinds.push({
      buffer: kv.buffer,
      heads: G,
      base4: kv.kBase / 4,
      S: ownKeys ? qRows : kvRows,
      stride: kv.stride,
      row0: kv.row0 + (ownKeys && !plan.cache ? kvRows - qRows : 0),
      normOffset: qkNorm?.query.length ?? 0, // Dh, or H·Dh with qkNorm.over 'all'
    });
  }
  // config.vNorm: the new values (a cache's new rows, else all keys' rows) before they are attended.
  if (vNorm)
    kinds.push({
      buffer: kv.buffer,
      heads: G,
      base4: kv.vBase / 4,
      S: plan.cache ? qRows : kvRows,
      stride: kv.stride,
      row0: kv.row0,
      normOffset: qkWeights.length,
      value: true,
    });
  for (const kind of kinds) encodeKernel(pass, scratch, HEAD_TRANSFORM, { plan, kind, normWeight, rope });
}
