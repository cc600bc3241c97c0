// Host side of shaders/copy_tensor.wgsl: a caller's GPU-resident tensor copied into a call's scratch
// buffer on the GPU (scaledDotProductAttention's Q, K, V given as GPUBuffers); and shaders/copy_rows.wgsl:
// the same between row widths, for inputs and outputs of sizes that are not multiples of 4 (padding.ts).

import rowsSource from '../../../shaders/copy_rows.wgsl?raw';
import source from '../../../shaders/copy_tensor.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { getPipeline, type PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, shaderCode } from '../shader.ts';

export const COPY_PARAMS = defineParams([
  ['count4', 'u32', 'vec4s copied'],
  ['dstOffset4', 'u32', 'where they go in dst, in vec4s'],
]);

export function copyTensorPipeline(precision: Precision): PipelineSpec {
  return { label: 'CopyTensor', code: shaderCode({ precision, params: COPY_PARAMS, sources: [source] }) };
}

/** Encodes dst[dstOffset + i] = src[i] for `count` elements (a multiple of 4; offsets too). */
export function encodeCopyTensor(pass: GPUComputePassEncoder, scratch: CallScratch, src: GPUBuffer, dst: GPUBuffer, count: number, dstOffset: number): void {
  const device = scratch.device;
  const pipeline = getPipeline(device, copyTensorPipeline(scratch.precision));
  const params = scratch.uniforms(COPY_PARAMS.pack({ count4: count / 4, dstOffset4: dstOffset / 4 }), 'CopyTensor.params');
  const bindGroup = device.createBindGroup({
    label: 'CopyTensor.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: src, size: Math.ceil((count * scratch.elementBytes) / 4) * 4 } },
      { binding: 2, resource: { buffer: dst } },
    ],
  });
  const groups = Math.ceil(count / 4 / 256);
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
}

export const COPY_ROWS_PARAMS = defineParams([
  ['rows', 'u32', 'rows copied'],
  ['srcCols', 'u32', 'elements a row of src'],
  ['dstCols', 'u32', 'elements a row of dst (more: zeros after the copy; fewer: the row cropped)'],
  ['dstOffset', 'u32', 'where the rows go in dst, in elements'],
]);

export function copyRowsPipeline(precision: Precision): PipelineSpec {
  return { label: 'CopyRows', code: shaderCode({ precision, params: COPY_ROWS_PARAMS, sources: [rowsSource] }) };
}

/** Encodes the copy of a [rows, srcCols] matrix into dst as [rows, dstCols] at element `dstOffset` (padded with zeros, or cropped). */
export function encodeCopyRows(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  src: GPUBuffer,
  dst: GPUBuffer,
  shape: { rows: number; srcCols: number; dstCols: number; dstOffset?: number },
): void {
  const device = scratch.device;
  const { rows, srcCols, dstCols, dstOffset = 0 } = shape;
  const pipeline = getPipeline(device, copyRowsPipeline(scratch.precision));
  const params = scratch.uniforms(COPY_ROWS_PARAMS.pack({ rows, srcCols, dstCols, dstOffset }), 'CopyRows.params');
  const bytes = (n: number) => Math.max(4, Math.ceil((n * scratch.elementBytes) / 4) * 4);
  const bindGroup = device.createBindGroup({
    label: 'CopyRows.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: src, size: bytes(rows * srcCols) } },
      { binding: 2, resource: { buffer: dst } },
    ],
  });
  const groups = Math.ceil((rows * dstCols) / 256);
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
}
