// Host side of shaders/decode_merge.wgsl: combines split-KV partial results (flash-decoding) into the
// attention output O [B, H, Sq, Dh] and the per-row softmax statistics.

import source from '../../../shaders/decode_merge.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { getPipeline, type PipelineSpec } from '../pipelines.ts';
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

export function decodeMergePipeline(precision: Precision): PipelineSpec {
  return { label: 'DecodeMerge', code: shaderCode({ precision, params: MERGE_PARAMS, sources: [source] }) };
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
  const bindGroup = scratch.device.createBindGroup({
    label: 'DecodeMerge.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.partial, size: splits * rows * headDim * el } }, // [splits, B, H, Sq, Dh]
      { binding: 2, resource: { buffer: buffers.parts, size: splits * rows * 8 } }, // (m, l) [splits, B, H, Sq]
      { binding: 3, resource: { buffer: buffers.attention, size: rows * headDim * el } }, // O [B, H, Sq, Dh]
      { binding: 4, resource: { buffer: buffers.rowStats, size: rows * 8 } }, // (M, L) [B, H, Sq]
      { binding: 5, resource: { buffer: buffers.headData } },
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(rows / WG));
}
