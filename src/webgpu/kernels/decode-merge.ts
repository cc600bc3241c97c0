// Host side of shaders/decode_merge.wgsl: combines split-KV partial results (flash-decoding) into the
// attention output O [B, H, Sq, Dh] and the per-row softmax statistics.

import source from '../../../shaders/decode_merge.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { defineBindings, PARAMS_BINDING } from '../bindings.ts';
import { getPipeline, type PipelineSpec, specCache } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, shaderCode } from '../shader.ts';

/** decode_merge.wgsl's uniforms. */
export const MERGE_PARAMS = defineParams([
  ['rows', 'u32', 'B·H·Sq'],
  ['splits', 'u32', 'key splits to merge'],
  ['Dh4', 'u32', 'head size / 4'],
  ['H', 'u32', 'query heads'],
  ['Sq', 'u32', 'query rows'],
  ['hasHeadMask', 'u32', '1: headMask [B·H] applies'],
  ['hasSinks', 'u32', '1: sink logits in headData[H … 2H) join each row'],
]);

/** decode_merge.wgsl's bindings. */
export const MERGE_BINDINGS = defineBindings('DecodeMerge', [
  PARAMS_BINDING,
  ['partial', 'read-only-storage', 'array<ST4>', "the splits' unnormalised accumulators [splits, B, H, Sq, Dh/4]"],
  ['parts', 'read-only-storage', 'array<vec2<f32>>', "the splits' (m, l) [splits, B, H, Sq]"],
  ['out', 'storage', 'array<ST4>', 'O [B, H, Sq, Dh/4]'],
  ['rowStats', 'storage', 'array<vec2<f32>>', '(M, L) per row [B, H, Sq]'],
  ['headData', 'read-only-storage', 'array<f32>', '[2·H + B·H]: ALiBi slopes, sinks, head mask (score_rule.wgsl)'],
]);

const specs = specCache();

export function decodeMergePipeline(precision: Precision): PipelineSpec {
  return specs(`DecodeMerge|${precision}`, () => ({
    label: 'DecodeMerge',
    code: shaderCode({ precision, params: MERGE_PARAMS, bindings: MERGE_BINDINGS, sources: [source] }),
    bindings: MERGE_BINDINGS,
  }));
}

const WG = 64; // the shader's @workgroup_size

export function encodeDecodeMerge(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  dims: { rows: number; splits: number; headDim: number; numHeads: number; seqLen: number; hasHeadMask: number; hasSinks: number },
  buffers: { partial: GPUBuffer; parts: GPUBuffer; attention: GPUBuffer; rowStats: GPUBuffer; headData: GPUBuffer },
): void {
  const { rows, splits, headDim, numHeads, seqLen, hasHeadMask, hasSinks } = dims;
  const el = scratch.elementBytes;
  const pipeline = getPipeline(scratch.device, decodeMergePipeline(scratch.precision));
  const params = scratch.uniforms(MERGE_PARAMS.pack({ rows, splits, Dh4: headDim / 4, H: numHeads, Sq: seqLen, hasHeadMask, hasSinks }), 'DecodeMerge.params');
  const bindGroup = MERGE_BINDINGS.group(scratch.device, {
    params,
    partial: { buffer: buffers.partial, size: splits * rows * headDim * el }, // [splits, B, H, Sq, Dh]
    parts: { buffer: buffers.parts, size: splits * rows * 8 }, // (m, l) [splits, B, H, Sq]
    out: { buffer: buffers.attention, size: rows * headDim * el }, // O [B, H, Sq, Dh]
    rowStats: { buffer: buffers.rowStats, size: rows * 8 }, // (M, L) [B, H, Sq]
    headData: buffers.headData,
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(rows / WG));
}
