// Host side of shaders/flash_attention.wgsl: Q, K, V (head-split) → O [B, H, Sq, Dh], online softmax,
// scores never stored; each row's softmax statistics (m, l) kept for attention-probs.ts.

import source from '../../../shaders/flash_attention.wgsl?raw';
import type { ForwardPlan } from '../../plan.ts';
import { packUniforms } from '../buffers.ts';
import { getPipeline, withConstants } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { qkvLayout } from './qkv-projection.ts';

const BR = 32;     // query rows per workgroup (one per invocation)
const MAX_BC = 32; // keys per tile, at most

/** Keys per tile: as many as fit K and V tiles in `workgroupBytes` of workgroup memory, up to MAX_BC. */
export function keysPerTile(headDim: number, workgroupBytes: number): number {
  const perKey = 2 * headDim * 4; // one row of K and one of V, f32
  return Math.max(1, Math.min(MAX_BC, Math.floor(workgroupBytes / perKey)));
}

export function encodeFlashAttention(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { qkv: GPUBuffer; attention: GPUBuffer; rowStats: GPUBuffer },
): void {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv, isCausal } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const layout = qkvLayout(plan);
  const device = scratch.device;
  const BC = keysPerTile(Dh, device.limits.maxComputeWorkgroupStorageSize);
  const pipeline = getPipeline(device, {
    label: 'FlashAttention',
    code: withConstants(source, { DH4: Dh / 4, BC }),
    constants: { BR },
  });
  const params = scratch.uniforms(
    packUniforms([
      ['u32', H], ['u32', G], ['u32', Sq], ['u32', Skv],
      ['u32', layout.kBase / 4], ['u32', layout.vBase / 4],
      ['u32', isCausal ? 1 : 0], ['i32', Skv - Sq],
      ['f32', Math.LOG2E / Math.sqrt(Dh)],
    ]),
    'FlashAttention.params',
  );
  const bindGroup = device.createBindGroup({
    label: 'FlashAttention.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.qkv, size: layout.total * 4 } },              // Q ++ K ++ V
      { binding: 2, resource: { buffer: buffers.attention, size: B * H * Sq * Dh * 4 } },     // O [B, H, Sq, Dh]
      { binding: 3, resource: { buffer: buffers.rowStats, size: B * H * Sq * 8 } },          // (m, l) [B, H, Sq]
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(Sq / BR), H, B);
}
