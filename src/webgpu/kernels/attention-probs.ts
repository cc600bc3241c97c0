// Host side of shaders/attention_probs.wgsl: the probabilities P [B, H, Sq, Skv], recomputed from
// Q, K and the flash kernel's per-row softmax statistics, only when the caller asks (needWeights).

import source from '../../../shaders/attention_probs.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { getPipeline, type PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts, shaderCode } from '../shader.ts';
import { SCORE_FIELDS, type MaskBuffers } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

/** attention_probs.wgsl's uniforms. */
export const PROBS_PARAMS = defineParams([
  ['H', 'u32', 'query heads'],
  ['G', 'u32', 'key/value heads'],
  ['Sq', 'u32', 'query rows'],
  ['Skv', 'u32', 'keys'],
  ['Dh4', 'u32', 'head size / 4'],
  ['kBase4', 'u32', 'where K starts in kv, in vec4s'],
  ...SCORE_FIELDS,
  ['scaleLog2e', 'f32', 'scale · log2(e), as in flash_attention.wgsl'],
  ['kvStride', 'u32', "rows per (b, g) block of K (Skv, or a KV cache's maxSeqLen)"],
]);

export function attentionProbsPipeline(precision: Precision, scoreMod?: string): PipelineSpec {
  const mod = scoreModParts(scoreMod);
  return {
    label: 'AttentionProbs',
    code: shaderCode({ precision, params: PROBS_PARAMS, sizes: { HAS_SCORE_MOD: mod.HAS_SCORE_MOD }, sources: [mod.source, scoreRule, source] }),
  };
}

const TILE = 16; // the shader's @workgroup_size(16, 16): 16 keys × 16 query rows

export function encodeAttentionProbs(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: KvTarget; rowStats: GPUBuffer; probs: GPUBuffer },
  masks: MaskBuffers,
): void {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { kv } = buffers;
  const device = scratch.device;
  const pipeline = getPipeline(device, attentionProbsPipeline(scratch.precision, plan.layer.scoreMod?.wgsl));
  const params = scratch.uniforms(
    PROBS_PARAMS.pack({ H, G, Sq, Skv, Dh4: Dh / 4, kBase4: kv.kBase / 4, ...masks.fields, scaleLog2e: plan.score.scale * Math.LOG2E, kvStride: kv.stride }),
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
      { binding: 6, resource: { buffer: masks.headData } }, // ALiBi slopes ++ sinks ++ head mask
      { binding: 7, resource: { buffer: kv.buffer } }, // K ++ V [B, G, stride, Dh]
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(Skv / TILE), Math.ceil(Sq / TILE), B * H);
}
