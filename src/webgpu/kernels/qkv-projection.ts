// Host side of shaders/qkv_projection.wgsl: X [B·S, E] · W_inᵀ + b_in → Q [B, H, S, Dh] ++ K, V [B, G, S, Dh].

import source from '../../../shaders/qkv_projection.wgsl?raw';
import type { ForwardPlan } from '../../plan.ts';
import { packUniforms } from '../buffers.ts';
import { getPipeline } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';

const WG_X = 8; // invocations along N; each owns 4 columns
const WG_Y = 8; // invocations along M; each owns 4 rows

/** Where Q, K and V sit in the packed qkv buffer, in floats. */
export function qkvLayout(plan: ForwardPlan): { kBase: number; vBase: number; total: number } {
  const { batchSize: B, seqLen: S } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const kBase = B * H * S * Dh;
  const vBase = kBase + B * G * S * Dh;
  return { kBase, vBase, total: vBase + B * G * S * Dh };
}

export function encodeQkvProjection(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { x: GPUBuffer; weight: GPUBuffer; bias: GPUBuffer; qkv: GPUBuffer },
): void {
  const { batchSize: B, seqLen: S } = plan;
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const M = B * S;
  const N = (H + 2 * G) * Dh;
  const layout = qkvLayout(plan);
  const pipeline = getPipeline(scratch.device, { label: 'QkvProjection', code: source, constants: { WG_X, WG_Y } });
  const params = scratch.uniforms(
    packUniforms([
      ['u32', M], ['u32', N], ['u32', E / 4], ['u32', S], ['u32', H], ['u32', G], ['u32', Dh / 4],
      ['u32', layout.kBase / 4], ['u32', layout.vBase / 4],
    ]),
    'QkvProjection.params',
  );
  const bindGroup = scratch.device.createBindGroup({
    label: 'QkvProjection.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.x, size: M * E * 4 } },      // X [B·S, E]
      { binding: 2, resource: { buffer: buffers.weight, size: N * E * 4 } }, // W [(H+2G)·Dh, E]
      { binding: 3, resource: { buffer: buffers.bias, size: N * 4 } },       // b [(H+2G)·Dh]
      { binding: 4, resource: { buffer: buffers.qkv, size: layout.total * 4 } },
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(N / (4 * WG_X)), Math.ceil(M / (4 * WG_Y)));
}
