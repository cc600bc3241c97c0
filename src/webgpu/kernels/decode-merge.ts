// Host side of shaders/decode_merge.wgsl: combines split-KV partial results (flash-decoding) into the
// attention output O [B, H, Sq, Dh] and the per-row softmax statistics.

import source from '../../../shaders/decode_merge.wgsl?raw';
import { packUniforms } from '../buffers.ts';
import { getPipeline, specialise } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';

const WG = 64; // the shader's @workgroup_size

export function encodeDecodeMerge(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  dims: { rows: number; splits: number; headDim: number; numHeads: number; seqLen: number; hasHeadMask: number },
  buffers: { partial: GPUBuffer; parts: GPUBuffer; attention: GPUBuffer; rowStats: GPUBuffer; headMask: GPUBuffer },
): void {
  const { rows, splits, headDim, numHeads, seqLen, hasHeadMask } = dims;
  const el = scratch.elementBytes;
  const pipeline = getPipeline(scratch.device, { label: 'DecodeMerge', code: specialise(source, scratch.precision) });
  const params = scratch.uniforms(
    packUniforms([
      ['u32', rows],
      ['u32', splits],
      ['u32', headDim / 4],
      ['u32', numHeads],
      ['u32', seqLen],
      ['u32', hasHeadMask],
    ]),
    'DecodeMerge.params',
  );
  const bindGroup = scratch.device.createBindGroup({
    label: 'DecodeMerge.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.partial, size: splits * rows * headDim * el } }, // [splits, B, H, Sq, Dh]
      { binding: 2, resource: { buffer: buffers.parts, size: splits * rows * 8 } }, // (m, l) [splits, B, H, Sq]
      { binding: 3, resource: { buffer: buffers.attention, size: rows * headDim * el } }, // O [B, H, Sq, Dh]
      { binding: 4, resource: { buffer: buffers.rowStats, size: rows * 8 } }, // (M, L) [B, H, Sq]
      { binding: 5, resource: { buffer: buffers.headMask } },
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(rows / WG));
}
