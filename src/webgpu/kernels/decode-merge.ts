// Host side of shaders/decode_merge.wgsl: combines split-KV partial results (flash-decoding) into the
// attention output O [B, H, Sq, Dh] and the per-row softmax statistics.

import source from '../../../shaders/decode_merge.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { encodeKernel, kernelSpec, singleKernel } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, pick } from '../shader.ts';
import { ATTENTION_FIELDS, OUT_BINDING } from './attention-fields.ts';
import { SCORE_BINDINGS, SCORE_FIELDS } from './masks.ts';

/** decode_merge.wgsl's uniforms. */
export const MERGE_PARAMS = defineParams([
  ['rows', 'u32', 'B·H·Sq'],
  ['splits', 'u32', 'key splits to merge'],
  ...pick(ATTENTION_FIELDS, 'H', 'Sq', 'Dh4'),
  ...pick(SCORE_FIELDS, 'hasHeadMask', 'hasSinks'), // the score rule's, applied to the merged rows
]);

/** decode_merge.wgsl's bindings. */
export const MERGE_BINDINGS = kernelBindings('DecodeMerge', [
  ['partial', 'read-only-storage', 'array<ST4>', "the splits' unnormalised accumulators [splits, B, H, Sq, Dh/4]"],
  ['parts', 'read-only-storage', 'array<vec2<f32>>', "the splits' (m, l) [splits, B, H, Sq]"],
  OUT_BINDING,
  ['rowStats', 'storage', 'array<vec2<f32>>', '(M, L) per row [B, H, Sq]'],
  ...pick(SCORE_BINDINGS, 'headData'),
]);

const WG = 64; // the shader's @workgroup_size

/** What is merged: rows of B·H·Sq, the splits, the head size; the head mask and sinks switches (score_rule.wgsl's). */
interface MergeDims {
  rows: number;
  splits: number;
  headDim: number;
  numHeads: number;
  seqLen: number;
  hasHeadMask: number;
  hasSinks: number;
}

/** The splits' partial results and statistics, where O and the rows' statistics go, the per-head data (sinks, head mask). */
interface MergeBuffers {
  partial: GPUBuffer;
  parts: GPUBuffer;
  attention: GPUBuffer;
  rowStats: GPUBuffer;
  headData: GPUBuffer;
}

/** The merge as a kernel (kernel.ts): an invocation per row, one specialisation. */
export const DECODE_MERGE = singleKernel({
  name: 'DecodeMerge',
  params: MERGE_PARAMS,
  bindings: MERGE_BINDINGS,
  source,
  run({ dims, buffers }: { dims: MergeDims; buffers: MergeBuffers }, scratch) {
    const { rows, splits, headDim } = dims;
    const el = scratch.elementBytes;
    return {
      uniforms: { rows, splits, Dh4: headDim / 4, H: dims.numHeads, Sq: dims.seqLen, hasHeadMask: dims.hasHeadMask, hasSinks: dims.hasSinks },
      buffers: {
        partial: { buffer: buffers.partial, size: splits * rows * headDim * el }, // [splits, B, H, Sq, Dh]
        parts: { buffer: buffers.parts, size: splits * rows * 8 }, // (m, l) [splits, B, H, Sq]
        out: { buffer: buffers.attention, size: rows * headDim * el }, // O [B, H, Sq, Dh]
        rowStats: { buffer: buffers.rowStats, size: rows * 8 }, // (M, L) [B, H, Sq]
        headData: buffers.headData,
      },
      groups: [Math.ceil(rows / WG)],
    };
  },
});

export function decodeMergePipeline(precision: Precision): PipelineSpec {
  return kernelSpec(DECODE_MERGE, precision, {});
}

export function encodeDecodeMerge(pass: GPUComputePassEncoder, scratch: CallScratch, dims: MergeDims, buffers: MergeBuffers): void {
  encodeKernel(pass, scratch, DECODE_MERGE, { dims, buffers });
}
