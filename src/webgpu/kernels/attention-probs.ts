// Host side of shaders/attention_probs.wgsl: the probabilities P [B, H, Sq, Skv], recomputed from
// Q, K and the flash kernel's per-row softmax statistics, only when the caller asks (needWeights).

import source from '../../../shaders/attention_probs.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { defineBindings, PARAMS_BINDING } from '../bindings.ts';
import { getPipeline, type PipelineSpec, specCache } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts, shaderCode } from '../shader.ts';
import { SCORE_BINDINGS, SCORE_FIELDS, scoreBuffers, type MaskBuffers } from './masks.ts';
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

/** attention_probs.wgsl's bindings. */
export const PROBS_BINDINGS = defineBindings('AttentionProbs', [
  PARAMS_BINDING,
  ['qkv', 'read-only-storage', 'array<ST4>', 'Q [B, H, Sq, Dh/4] (++ K ++ V)'],
  ['rowStats', 'read-only-storage', 'array<vec2<f32>>', '(m, l) per row [B, H, Sq]'],
  ['probs', 'storage', 'array<f32>', 'P [B, H, Sq, Skv]'],
  ...SCORE_BINDINGS,
  ['kv', 'read-only-storage', 'array<ST4>', 'K ++ V [B, G, kvStride, Dh/4] (the qkv buffer, or a KV cache)'],
]);

const specs = specCache();

export function attentionProbsPipeline(precision: Precision, scoreMod?: string): PipelineSpec {
  return specs(`AttentionProbs|${precision}|${scoreMod ?? ''}`, () => {
    const mod = scoreModParts(scoreMod);
    return {
      label: 'AttentionProbs',
      code: shaderCode({
        precision,
        params: PROBS_PARAMS,
        bindings: PROBS_BINDINGS,
        sizes: { HAS_SCORE_MOD: mod.HAS_SCORE_MOD },
        sources: [mod.source, scoreRule, source],
      }),
      bindings: PROBS_BINDINGS,
    };
  });
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
  const bindGroup = PROBS_BINDINGS.group(device, {
    params,
    qkv: buffers.q, // Q [B, H, Sq, Dh] (++ K ++ V)
    rowStats: { buffer: buffers.rowStats, size: B * H * Sq * 8 }, // (m, l) [B, H, Sq]
    probs: { buffer: buffers.probs, size: B * H * Sq * Skv * 4 }, // P [B, H, Sq, Skv]
    ...scoreBuffers(masks),
    kv: kv.buffer, // K ++ V [B, G, stride, Dh]
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(Skv / TILE), Math.ceil(Sq / TILE), B * H);
}
