// Host side of shaders/copy_tensor.wgsl: a caller's GPU-resident tensor copied into a call's scratch
// buffer on the GPU (scaledDotProductAttention's Q, K, V given as GPUBuffers); and shaders/copy_rows.wgsl:
// the same between row widths, for inputs and outputs of sizes that are not multiples of 4 (padding.ts).

import rowsSource from '../../../shaders/copy_rows.wgsl?raw';
import source from '../../../shaders/copy_tensor.wgsl?raw';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { encodeKernel, kernelSpec, singleKernel } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';

export const COPY_PARAMS = defineParams([
  ['count4', 'u32', 'vec4s copied'],
  ['dstOffset4', 'u32', 'where they go in dst, in vec4s'],
]);

/** A copy's bindings: src read, dst written, both of `element`s (ST4: vec4s; ST: elements), with their shapes. */
function copyBindings<E extends 'ST' | 'ST4'>(label: string, element: E, src: string, dst: string) {
  return kernelBindings(label, [
    ['src', 'read-only-storage', `array<${element}>`, src],
    ['dst', 'storage', `array<${element}>`, dst],
  ]);
}

export const COPY_BINDINGS = copyBindings('CopyTensor', 'ST4', 'count4 vec4s', 'written from dstOffset4 on');

/** Up to 65535 workgroups along x, the rest along y (the shaders flatten them): `count` invocations in workgroups of 256. */
function flatGroups(count: number): [number, number] {
  const groups = Math.ceil(count / 256);
  return [Math.min(groups, 65535), Math.ceil(groups / 65535)];
}

/** The copy as a kernel (kernel.ts): an invocation per vec4, one specialisation. */
export const COPY_TENSOR = singleKernel({
  name: 'CopyTensor',
  params: COPY_PARAMS,
  bindings: COPY_BINDINGS,
  source,
  run({ src, dst, count, dstOffset }: { src: GPUBuffer; dst: GPUBuffer; count: number; dstOffset: number }, scratch) {
    return {
      uniforms: { count4: count / 4, dstOffset4: dstOffset / 4 },
      buffers: { src: { buffer: src, size: Math.ceil((count * scratch.elementBytes) / 4) * 4 }, dst },
      groups: flatGroups(count / 4),
    };
  },
});

export function copyTensorPipeline(precision: Precision): PipelineSpec {
  return kernelSpec(COPY_TENSOR, precision, {});
}

/** Encodes dst[dstOffset + i] = src[i] for `count` elements (a multiple of 4; offsets too). */
export function encodeCopyTensor(pass: GPUComputePassEncoder, scratch: CallScratch, src: GPUBuffer, dst: GPUBuffer, count: number, dstOffset: number): void {
  encodeKernel(pass, scratch, COPY_TENSOR, { src, dst, count, dstOffset });
}

export const COPY_ROWS_PARAMS = defineParams([
  ['rows', 'u32', 'rows copied'],
  ['srcCols', 'u32', 'elements a row of src'],
  ['dstCols', 'u32', 'elements a row of dst (more: zeros after the copy; fewer: the row cropped)'],
  ['dstOffset', 'u32', 'where the rows go in dst, in elements'],
]);

export const COPY_ROWS_BINDINGS = copyBindings('CopyRows', 'ST', '[rows, srcCols]', '[rows, dstCols] from dstOffset on');

/** The copy between row widths as a kernel (kernel.ts): an invocation per element of dst, one specialisation. */
export const COPY_ROWS = singleKernel({
  name: 'CopyRows',
  params: COPY_ROWS_PARAMS,
  bindings: COPY_ROWS_BINDINGS,
  source: rowsSource,
  run({ src, dst, shape }: { src: GPUBuffer; dst: GPUBuffer; shape: { rows: number; srcCols: number; dstCols: number; dstOffset?: number } }, scratch) {
    const { rows, srcCols, dstCols, dstOffset = 0 } = shape;
    const bytes = Math.max(4, Math.ceil((rows * srcCols * scratch.elementBytes) / 4) * 4);
    return { uniforms: { rows, srcCols, dstCols, dstOffset }, buffers: { src: { buffer: src, size: bytes }, dst }, groups: flatGroups(rows * dstCols) };
  },
});

export function copyRowsPipeline(precision: Precision): PipelineSpec {
  return kernelSpec(COPY_ROWS, precision, {});
}

/** Encodes the copy of a [rows, srcCols] matrix into dst as [rows, dstCols] at element `dstOffset` (padded with zeros, or cropped). */
export function encodeCopyRows(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  src: GPUBuffer,
  dst: GPUBuffer,
  shape: { rows: number; srcCols: number; dstCols: number; dstOffset?: number },
): void {
  encodeKernel(pass, scratch, COPY_ROWS, { src, dst, shape });
}
