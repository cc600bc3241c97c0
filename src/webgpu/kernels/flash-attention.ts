// Host side of shaders/flash_attention.wgsl: Q, K, V (head-split) → O [B, H, Sq, Dh], online softmax,
// scores never stored; each row's softmax statistics (m, l) kept for attention-probs.ts. Holds the
// kernel's uniforms and bindings (one declaration each), the tiles on a device, split-KV, and the
// pipeline spec of a variant, built once per variant and shape class (each body's record is in the
// registry: variants.ts attentionRecord).

import source from '../../../shaders/flash_attention.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts, shaderCode } from '../shader.ts';
import type { AttentionVariant } from '../../types.ts';
import { largestSubgroup } from '../variant-record.ts';
import { attentionRecord, attentionShape } from '../variants.ts';
import { ATTENTION_FIELDS, attentionFields, type KvFormat, kvBinding, kvLoader, QKV_BINDING, SCALE_FIELD } from './attention-fields.ts';
import { encodeDecodeMerge } from './decode-merge.ts';
import { SCORE_BINDINGS, SCORE_FIELDS, scoreBuffers, type MaskBuffers } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

/** flash_attention.wgsl's uniforms. */
export const FLASH_PARAMS = defineParams([
  ...ATTENTION_FIELDS,
  ['varlen', 'u32', "1: cuSeqlens gives each sequence's rows"],
  ['totalRows', 'u32', 'varlen: T'],
  ...SCORE_FIELDS,
  SCALE_FIELD,
  ['splitChunk', 'u32', '> 0: split-KV, workgroup x covers keys [x·splitChunk, (x+1)·splitChunk); a multiple of BC'],
  ['splitRows', 'u32', "split-KV: B·H·Sq, the rows of one split's slice of out and rowStats"],
]);

/** flash_attention.wgsl's bindings (every body's), K and V stored as `format` (attention-fields.ts kvBinding). */
function flashBindings(format: KvFormat | undefined) {
  return kernelBindings('FlashAttention', [
    QKV_BINDING,
    ['out', 'storage', 'array<ST4>', "O [B, H, Sq, Dh/4], or the splits' partial accumulators [splits, B, H, Sq, Dh/4]"],
    ['rowStats', 'storage', 'array<vec2<f32>>', '(m, l) per row [B, H, Sq], or per split'],
    ...SCORE_BINDINGS,
    ['cuSeqlens', 'read-only-storage', 'array<u32>', 'varlen: [B + 1]'],
    kvBinding(format),
  ]);
}

/** flash_attention.wgsl's bindings with K and V of the engine's storage type; FLASH_KV_BINDINGS[format] for a cache stored otherwise. */
export const FLASH_BINDINGS = flashBindings(undefined);
const FLASH_KV_BINDINGS = { f32: flashBindings('f32'), f16x2: flashBindings('f16x2'), q8_0: flashBindings('q8_0'), q4_0: flashBindings('q4_0') } as const;

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

/**
 * What a flash attention pipeline is specialised for: the body, the head size, the tiles on the device
 * (flashTiles), the layer's scoreMod, how K and V are stored (undefined: ST4, as the engine's tensors).
 */
type FlashSpecialisation = {
  variant: AttentionVariant;
  headDim: number;
  BR: number;
  BC: number;
  RPI: number;
  scoreMod: string | undefined;
  kvFormat: KvFormat | undefined;
};

function flashSpecialisation(
  device: GPUDevice,
  headDim: number,
  variant: AttentionVariant,
  scoreMod: string | undefined,
  kvFormat: KvFormat | undefined,
): FlashSpecialisation {
  return { variant, headDim, ...flashTiles(device, headDim, variant), scoreMod, kvFormat };
}

/** One dispatch: the plan, the variant, Q, K and V, where O and the row statistics go (a split's scratch under split-KV), the masks. */
interface FlashArgs {
  plan: ForwardPlan;
  variant: AttentionVariant;
  q: GPUBuffer;
  kv: KvTarget;
  out: GPUBuffer;
  rowStats: GPUBuffer;
  masks: MaskBuffers;
  split: { splits: number; chunk: number } | null;
  rowLimit: number;
}

/** Flash attention as a kernel (kernel.ts): the shared frame and the variant's body (its record builds the source). */
export const FLASH_ATTENTION = defineKernel({
  name: 'FlashAttention',
  params: FLASH_PARAMS,
  specialise: (args: FlashArgs, device: GPUDevice) => flashSpecialisation(device, args.plan.layer.headDim, args.variant, args.plan.layer.scoreMod?.wgsl, args.kv.format),
  bindings: (s) => (s.kvFormat ? FLASH_KV_BINDINGS[s.kvFormat] : FLASH_BINDINGS),
  label: (s) => `FlashAttention.${s.variant}`,
  shader: (s, precision) => {
    const bindings = (format: KvFormat | undefined) => (format ? FLASH_KV_BINDINGS[format] : FLASH_BINDINGS);
    const mod = scoreModParts(s.scoreMod);
    const code = (body: string, sizes: Record<string, number>, subgroups: boolean) =>
      shaderCode({
        precision,
        subgroups,
        params: FLASH_PARAMS,
        bindings: bindings(s.kvFormat),
        sizes,
        sources: [mod.source, scoreRule, kvLoader(s.kvFormat), source, body],
      });
    return attentionRecord(s.variant).build({ precision, headDim: s.headDim, BR: s.BR, BC: s.BC, RPI: s.RPI, hasScoreMod: mod.HAS_SCORE_MOD, code });
  },
  run({ plan, kv, masks, split, ...args }, _scratch, s) {
    const H = plan.layer.numHeads;
    const { batches, qRows, sequences, longestSequence } = plan.geometry;
    return {
      uniforms: {
        ...attentionFields(plan, kv),
        ...masks.fields,
        scaleLog2e: plan.score.scale * Math.LOG2E,
        varlen: plan.mode === 'varlen' ? 1 : 0,
        totalRows: plan.seqLen,
        splitChunk: split?.chunk ?? 0,
        splitRows: batches * H * qRows,
      },
      buffers: { qkv: args.q, out: args.out, rowStats: args.rowStats, ...scoreBuffers(masks), cuSeqlens: masks.cuSeqlens, kv: kv.buffer },
      // Varlen: one workgroup column per sequence, as many query tiles as the longest needs (shorter
      // sequences' extra tiles return at once). Split-KV: one workgroup column per split.
      groups: [split ? split.splits : Math.ceil(Math.min(longestSequence, args.rowLimit) / s.BR), H, sequences],
    };
  },
});

/** The pipeline of `variant` for head size Dh at this precision on this device, K and V stored as `kvFormat` (built once per variant and shape class). */
export function flashAttentionPipeline(
  device: GPUDevice,
  precision: Precision,
  headDim: number,
  variant: AttentionVariant,
  scoreMod?: string,
  kvFormat?: KvFormat,
): PipelineSpec {
  return kernelSpec(FLASH_ATTENTION, precision, flashSpecialisation(device, headDim, variant, scoreMod, kvFormat));
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
  const { numHeads: H, headDim: Dh } = plan.layer;
  const { batches, qRows } = plan.geometry;
  const { BR, BC } = flashTiles(scratch.device, Dh, variant);
  const rows = batches * H * qRows;
  // Split-KV writes partial results to scratch, then decode_merge.wgsl combines them.
  const split = splitKv(plan, BC, BR);
  const out = split ? scratch.storage(split.splits * rows * Dh * scratch.elementBytes, 'splitPartial') : buffers.attention;
  const rowStats = split ? scratch.storage(split.splits * rows * 8, 'splitStats') : buffers.rowStats;
  encodeKernel(pass, scratch, FLASH_ATTENTION, { plan, variant, q: buffers.q, kv: buffers.kv, out, rowStats, masks, split, rowLimit });
  if (split) {
    encodeDecodeMerge(
      pass,
      scratch,
      { rows, splits: split.splits, headDim: Dh, numHeads: H, seqLen: qRows, hasHeadMask: masks.fields.hasHeadMask, hasSinks: masks.fields.hasSinks },
      { partial: out, parts: rowStats, attention: buffers.attention, rowStats: buffers.rowStats, headData: masks.headData },
    );
  }
}
