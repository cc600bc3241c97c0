// Host side of shaders/copy_tensor.wgsl: a caller's GPU-resident tensor copied into a call's scratch
// buffer on the GPU (scaledDotProductAttention's Q, K, V given as GPUBuffers); and shaders/copy_rows.wgsl:
// the same between row widths, for inputs and outputs of sizes that are not multiples of 4 (padding.ts).

import rowsSource from '../../../shaders/copy_rows.wgsl?raw';
import source from '../../../shaders/copy_tensor.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { defineBindings, PARAMS_BINDING } from '../bindings.ts';
import { getPipeline, type PipelineSpec, specCache } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, shaderCode } from '../shader.ts';

export const COPY_PARAMS = defineParams([
  ['count4', 'u32', 'vec4s copied'],
  ['dstOffset4', 'u32', 'where they go in dst, in vec4s'],
]);

export const COPY_BINDINGS = defineBindings('CopyTensor', [
  PARAMS_BINDING,
  ['src', 'read-only-storage', 'array<ST4>', 'count4 vec4s'],
  ['dst', 'storage', 'array<ST4>', 'written from dstOffset4 on'],
]);

const specs = specCache();

export function copyTensorPipeline(precision: Precision): PipelineSpec {
  return specs(`CopyTensor|${precision}`, () => ({
    label: 'CopyTensor',
    code: shaderCode({ precision, params: COPY_PARAMS, bindings: COPY_BINDINGS, sources: [source] }),
    bindings: COPY_BINDINGS,
  }));
}

/** Encodes dst[dstOffset + i] = src[i] for `count` elements (a multiple of 4; offsets too). */
export function encodeCopyTensor(pass: GPUComputePassEncoder, scratch: CallScratch, src: GPUBuffer, dst: GPUBuffer, count: number, dstOffset: number): void {
  const device = scratch.device;
  const pipeline = getPipeline(device, copyTensorPipeline(scratch.precision));
  const params = scratch.uniforms(COPY_PARAMS.pack({ count4: count / 4, dstOffset4: dstOffset / 4 }), 'CopyTensor.params');
  const bindGroup = COPY_BINDINGS.group(device, { params, src: { buffer: src, size: Math.ceil((count * scratch.elementBytes) / 4) * 4 }, dst });
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

export const COPY_ROWS_BINDINGS = defineBindings('CopyRows', [
  PARAMS_BINDING,
  ['src', 'read-only-storage', 'array<ST>', '[rows, srcCols]'],
  ['dst', 'storage', 'array<ST>', '[rows, dstCols] from dstOffset on'],
]);

export function copyRowsPipeline(precision: Precision): PipelineSpec {
  return specs(`CopyRows|${precision}`, () => ({
    label: 'CopyRows',
    code: shaderCode({ precision, params: COPY_ROWS_PARAMS, bindings: COPY_ROWS_BINDINGS, sources: [rowsSource] }),
    bindings: COPY_ROWS_BINDINGS,
  }));
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
  const bindGroup = COPY_ROWS_BINDINGS.group(device, { params, src: { buffer: src, size: bytes(rows * srcCols) }, dst });
  const groups = Math.ceil((rows * dstCols) / 256);
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
}
