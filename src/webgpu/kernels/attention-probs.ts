// Host side of shaders/attention_probs.wgsl: the probabilities P [B, H, Sq, Skv], recomputed from
// Q, K and the flash kernel's per-row softmax statistics, only when the caller asks (needWeights).

import source from '../../../shaders/attention_probs.wgsl?raw';
import type { ForwardPlan } from '../../plan.ts';
import { packUniforms } from '../buffers.ts';
import { getPipeline, specialise } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import type { MaskBuffers } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

const TILE = 16; // the shader's @workgroup_size(16, 16): 16 keys × 16 query rows

export function encodeAttentionProbs(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: KvTarget; rowStats: GPUBuffer; probs: GPUBuffer },
  masks: MaskBuffers,
): void {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv, isCausal } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { kv } = buffers;
  const device = scratch.device;
  const pipeline = getPipeline(device, { label: 'AttentionProbs', code: specialise(source, scratch.precision) });
  const params = scratch.uniforms(
    packUniforms([
      ['u32', H],
      ['u32', G],
      ['u32', Sq],
      ['u32', Skv],
      ['u32', Dh / 4],
      ['u32', kv.kBase / 4],
      ['u32', isCausal ? 1 : 0],
      ['u32', plan.masks.window],
      ['f32', Math.LOG2E / Math.sqrt(Dh)],
      ['u32', masks.maskMode],
      ['u32', masks.hasPadding],
      ['u32', masks.hasHeadMask],
      ['u32', kv.stride],
    ]),
    'AttentionProbs.params',
  );
  const bindGroup = device.createBindGroup({
    label: 'AttentionProbs.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.q } }, // Q [B, H, Sq, Dh] (++ K ++ V)
      { binding: 2, resource: { buffer: buffers.rowStats, size: B * H * Sq * 8 } }, // (m, l) [B, H, Sq]
      { binding: 3, resource: { buffer: buffers.probs, size: B * H * Sq * Skv * 4 } }, // P [B, H, Sq, Skv]
      { binding: 4, resource: { buffer: masks.attnMask } },
      { binding: 5, resource: { buffer: masks.padding } },
      { binding: 6, resource: { buffer: masks.headMask } },
      { binding: 7, resource: { buffer: kv.buffer } }, // K ++ V [B, G, stride, Dh]
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(Skv / TILE), Math.ceil(Sq / TILE), B * H);
}
