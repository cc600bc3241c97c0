// Host side of shaders/flash_attention.wgsl: Q, K, V (head-split) → O [B, H, Sq, Dh], online softmax,
// scores never stored; each row's softmax statistics (m, l) kept for attention-probs.ts.

import source from '../../../shaders/flash_attention.wgsl?raw';
import oneRowBody from '../../../shaders/flash_attention_row.wgsl?raw';
import rowsBody from '../../../shaders/flash_attention_rows.wgsl?raw';
import shuffleBody from '../../../shaders/flash_attention_shuffle.wgsl?raw';
import subgroupBody from '../../../shaders/flash_attention_subgroup.wgsl?raw';
import unrolledBody from '../../../shaders/flash_attention_unrolled.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { getPipeline, type PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts, shaderCode, unrollLoops } from '../shader.ts';
import { type AttentionVariant, attentionShape, largestSubgroup, subgroupEmulation } from '../variants.ts';
import { encodeDecodeMerge } from './decode-merge.ts';
import { SCORE_FIELDS, type MaskBuffers } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

/** flash_attention.wgsl's uniforms. */
export const FLASH_PARAMS = defineParams([
  ['H', 'u32', 'query heads'],
  ['G', 'u32', 'key/value heads'],
  ['Sq', 'u32', 'query rows per sequence (varlen: unused, from cuSeqlens)'],
  ['Skv', 'u32', 'keys per sequence (varlen: unused)'],
  ['kBase4', 'u32', 'where K starts in kv, in vec4s'],
  ['vBase4', 'u32', 'where V starts in kv, in vec4s'],
  ['Dh4', 'u32', 'head size / 4 (DH4, as a value the compiler does not unroll loops over)'],
  ...SCORE_FIELDS,
  ['scaleLog2e', 'f32', "scale · log2(e) (scale: the caller's, else 1/√Dh)"],
  ['varlen', 'u32', "1: cuSeqlens gives each sequence's rows"],
  ['totalRows', 'u32', 'varlen: T'],
  ['kvStride', 'u32', 'rows per (b, g) block of K and V'],
  ['splitChunk', 'u32', '> 0: split-KV, workgroup x covers keys [x·splitChunk, (x+1)·splitChunk); a multiple of BC'],
  ['splitRows', 'u32', "split-KV: B·H·Sq, the rows of one split's slice of out and rowStats"],
]);

/** Split-KV: keys per split, roughly, and the most splits. */
const SPLIT_KEYS = 256;
const MAX_SPLITS = 32;

/**
 * Split-KV ("flash-decoding") for a call with one query tile and many keys (a decode step on a long
 * cache): how many splits, and the keys each covers (a multiple of BC). Null when it does not pay.
 */
export function splitKv(plan: ForwardPlan, BC: number, BR: number): { splits: number; chunk: number } | null {
  if (plan.mode === 'varlen' || plan.seqLen > BR || plan.kvSeqLen < 2 * SPLIT_KEYS) return null;
  const want = Math.min(MAX_SPLITS, Math.ceil(plan.kvSeqLen / SPLIT_KEYS));
  const chunk = Math.ceil(Math.ceil(plan.kvSeqLen / want) / BC) * BC;
  return { splits: Math.ceil(plan.kvSeqLen / chunk), chunk };
}

/** Keys per tile: `wanted`, or fewer so that the K and V tiles fit `workgroupBytes` of workgroup memory. */
export function keysPerTile(headDim: number, workgroupBytes: number, wanted = 32): number {
  const perKey = 2 * headDim * 4; // one row of K and one of V, f32
  return Math.max(1, Math.min(wanted, Math.floor(workgroupBytes / perKey)));
}

/**
 * The tiles of an attention variant on this device for head size Dh: rows per workgroup BR, keys per
 * tile BC (fewer if K and V tiles would not fit workgroup memory), rows per invocation RPI (fewer
 * for big heads, keeping RPI·Dh ≤ 256 floats of q and as many of accumulator per invocation).
 */
export function flashTiles(device: GPUDevice, Dh: number, variant: AttentionVariant): { BR: number; BC: number; RPI: number } {
  const { rows, keys, rowsPerInvocation, shuffle } = attentionShape(variant);
  const RPI = Math.max(1, Math.min(rowsPerInvocation, Math.floor(256 / Dh)));
  if (shuffle) {
    // Whole subgroups: the workgroup is a multiple of the largest subgroup size (128 where unknown).
    const largest = largestSubgroup(device);
    const WG = Math.ceil(Math.max(rows / RPI, largest) / largest) * largest;
    return { BR: WG * RPI, BC: keys, RPI };
  }
  const BR = Math.min(rows, device.limits.maxComputeInvocationsPerWorkgroup * RPI);
  return { BR, BC: keysPerTile(Dh, device.limits.maxComputeWorkgroupStorageSize, keys), RPI };
}

/** The pipeline of `variant` for head size Dh at this precision on this device. */
export function flashAttentionPipeline(device: GPUDevice, precision: Precision, headDim: number, variant: AttentionVariant, scoreMod?: string): PipelineSpec {
  const { BR, BC, RPI } = flashTiles(device, headDim, variant);
  const { loop, subgroup, unrolled, shuffle } = attentionShape(variant);
  // One row per invocation has its own body (scalars, no per-row arrays), which drivers that do not
  // unroll constant loops (SwiftShader's JIT) run faster than the RPI body at RPI = 1; the tuner measures which.
  const label = `FlashAttention.${variant}`;
  const mod = scoreModParts(scoreMod);
  if (subgroup) {
    // The lanes of a subgroup share a row (flash_attention_subgroup.wgsl): BR rows, 64 invocations.
    const sizes = { DH4: headDim / 4, BC, HAS_SCORE_MOD: mod.HAS_SCORE_MOD };
    const code = shaderCode({ precision, subgroups: true, params: FLASH_PARAMS, sizes, sources: [mod.source, scoreRule, source, subgroupBody] });
    return { label, code, constants: { WG: 64, BR, SUBGROUP_LANES: subgroupEmulation.lanes } };
  }
  // The bodies whose loops the host writes out: over the rows, a step's keys and, up to Dh = 64, the
  // head size. Past Dh = 64 the loops over the head size run to params.Dh4, which no compiler unrolls:
  // written out, Dh = 128 took lavapipe's LLVM over 2 minutes to compile.
  const writtenOut = (body: string, counts: Record<string, number>) =>
    headDim <= 64 ? unrollLoops(body, { DH4: headDim / 4, ...counts }) : unrollLoops(body.replaceAll('d < DH4; d++', 'd < params.Dh4; d++'), counts);
  if (shuffle) {
    // Each block of K/V rows loaded once per subgroup and shuffled to every lane.
    const sizes = { DH4: headDim / 4, BC, RPI, HAS_SCORE_MOD: mod.HAS_SCORE_MOD };
    const body = writtenOut(shuffleBody, { RPI, KC: 4 });
    const code = shaderCode({ precision, subgroups: true, params: FLASH_PARAMS, sizes, sources: [mod.source, scoreRule, source, body] });
    return { label, code, constants: { WG: BR / RPI, SUBGROUP_LANES: subgroupEmulation.lanes } };
  }
  if (unrolled) {
    // K and V from storage, 4 keys a step.
    const sizes = { DH4: headDim / 4, BC, RPI, HAS_SCORE_MOD: mod.HAS_SCORE_MOD };
    const body = writtenOut(unrolledBody, { RPI });
    return { label, code: shaderCode({ precision, params: FLASH_PARAMS, sizes, sources: [mod.source, scoreRule, source, body] }), constants: { WG: BR / RPI } };
  }
  const sources = [mod.source, scoreRule, source, RPI === 1 ? oneRowBody : rowsBody];
  return RPI === 1
    ? {
        label,
        code: shaderCode({ precision, params: FLASH_PARAMS, sizes: { DH4: headDim / 4, BC, LOOP: loop ? 1 : 0, HAS_SCORE_MOD: mod.HAS_SCORE_MOD }, sources }),
        constants: { BR },
      }
    : {
        label,
        code: shaderCode({ precision, params: FLASH_PARAMS, sizes: { DH4: headDim / 4, BC, RPI, HAS_SCORE_MOD: mod.HAS_SCORE_MOD }, sources }),
        constants: { WG: BR / RPI },
      };
}

export function encodeFlashAttention(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: KvTarget; attention: GPUBuffer; rowStats: GPUBuffer },
  masks: MaskBuffers,
  variant: AttentionVariant,
  /** The tuner's timing trials: compute only the first `rowLimit` query rows of each (batch, head). */
  rowLimit = Infinity,
): void {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { batches, qRows, sequences, longestSequence } = plan.geometry;
  const { kv } = buffers;
  const device = scratch.device;
  const { BR, BC } = flashTiles(device, Dh, variant);
  const pipeline = getPipeline(device, flashAttentionPipeline(device, scratch.precision, Dh, variant, plan.layer.scoreMod?.wgsl));
  const rows = batches * H * qRows;
  // Split-KV writes partial results to scratch, then decode_merge.wgsl combines them.
  const split = splitKv(plan, BC, BR);
  const out = split ? scratch.storage(split.splits * rows * Dh * scratch.elementBytes, 'splitPartial') : buffers.attention;
  const stats = split ? scratch.storage(split.splits * rows * 8, 'splitStats') : buffers.rowStats;
  const params = scratch.uniforms(
    FLASH_PARAMS.pack({
      H,
      G,
      Sq: plan.seqLen,
      Skv: plan.kvSeqLen,
      kBase4: kv.kBase / 4,
      vBase4: kv.vBase / 4,
      Dh4: Dh / 4,
      ...masks.fields,
      scaleLog2e: plan.score.scale * Math.LOG2E,
      varlen: plan.mode === 'varlen' ? 1 : 0,
      totalRows: plan.seqLen,
      kvStride: kv.stride,
      splitChunk: split?.chunk ?? 0,
      splitRows: rows,
    }),
    'FlashAttention.params',
  );
  const bindGroup = device.createBindGroup({
    label: 'FlashAttention.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.q } }, // Q [B, H, Sq, Dh] (++ K ++ V)
      { binding: 2, resource: { buffer: out } }, // O [B, H, Sq, Dh], or the splits' partial accumulators
      { binding: 3, resource: { buffer: stats } }, // (m, l) [B, H, Sq], or per split
      { binding: 4, resource: { buffer: masks.attnMask } },
      { binding: 5, resource: { buffer: masks.padding } },
      { binding: 6, resource: { buffer: masks.headData } }, // ALiBi slopes ++ sinks ++ head mask
      { binding: 7, resource: { buffer: masks.cuSeqlens } },
      { binding: 8, resource: { buffer: kv.buffer } }, // K ++ V [B, G, stride, Dh]
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  // Varlen: one workgroup column per sequence, as many query tiles as the longest needs (shorter
  // sequences' extra tiles return at once). Split-KV: one workgroup column per split.
  pass.dispatchWorkgroups(split ? split.splits : Math.ceil(Math.min(longestSequence, rowLimit) / BR), H, sequences);
  if (split) {
    encodeDecodeMerge(
      pass,
      scratch,
      { rows, splits: split.splits, headDim: Dh, numHeads: H, seqLen: qRows, hasHeadMask: masks.fields.hasHeadMask, hasSinks: masks.fields.hasSinks },
      { partial: out, parts: stats, attention: buffers.attention, rowStats: buffers.rowStats, headData: masks.headData },
    );
  }
}
