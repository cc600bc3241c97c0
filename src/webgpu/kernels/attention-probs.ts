// Host side of shaders/attention_probs.wgsl: the probabilities P [B, H, Sq, Skv], recomputed from
// Q, K and the flash kernel's per-row softmax statistics, only when the caller asks (needWeights).

import source from '../../../shaders/attention_probs.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, omit, scoreModParts } from '../shader.ts';
import { ATTENTION_FIELDS, attentionFields, type KvFormat, kvBinding, kvLoader, QKV_BINDING, SCALE_FIELD } from './attention-fields.ts';
import { SCORE_BINDINGS, SCORE_FIELDS, scoreBuffers, type MaskBuffers } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

/** attention_probs.wgsl's uniforms. */
export const PROBS_PARAMS = defineParams([...omit(ATTENTION_FIELDS, 'vBase4'), ...SCORE_FIELDS, SCALE_FIELD]); // P reads no V

/** attention_probs.wgsl's bindings, K stored as `format` (attention-fields.ts kvBinding). */
function probsBindings(format: KvFormat | undefined) {
  return kernelBindings('AttentionProbs', [
    QKV_BINDING,
    ['rowStats', 'read-only-storage', 'array<vec2<f32>>', '(m, l) per row [B, H, Sq]'],
    ['probs', 'storage', 'array<f32>', 'P [B, H, Sq, Skv]'],
    ...SCORE_BINDINGS,
    kvBinding(format),
  ]);
}

/** attention_probs.wgsl's bindings with K of the engine's storage type; PROBS_KV_BINDINGS[format] for a cache stored otherwise. */
export const PROBS_BINDINGS = probsBindings(undefined);
const PROBS_KV_BINDINGS = { f32: probsBindings('f32'), f16x2: probsBindings('f16x2'), q8_0: probsBindings('q8_0'), q4_0: probsBindings('q4_0') } as const;

const TILE = 16; // the shader's @workgroup_size(16, 16): 16 keys × 16 query rows

/** One dispatch: the plan, Q, K, the flash kernel's row statistics, where P goes, the masks. */
interface ProbsArgs {
  plan: ForwardPlan;
  q: GPUBuffer;
  kv: KvTarget;
  rowStats: GPUBuffer;
  probs: GPUBuffer;
  masks: MaskBuffers;
}

/** The probabilities as a kernel (kernel.ts): a workgroup per 16 × 16 tile of P, specialised by the layer's scoreMod. */
export const ATTENTION_PROBS = defineKernel({
  name: 'AttentionProbs',
  params: PROBS_PARAMS,
  specialise: (args: ProbsArgs): { scoreMod: string | undefined; kvFormat: KvFormat | undefined } => ({
    scoreMod: args.plan.layer.scoreMod?.wgsl,
    kvFormat: args.kv.format,
  }),
  bindings: (s) => (s.kvFormat ? PROBS_KV_BINDINGS[s.kvFormat] : PROBS_BINDINGS),
  shader: (s) => {
    const mod = scoreModParts(s.scoreMod);
    return { sizes: { HAS_SCORE_MOD: mod.HAS_SCORE_MOD }, sources: [mod.source, scoreRule, kvLoader(s.kvFormat), source] };
  },
  run({ plan, kv, masks, ...args }) {
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const H = plan.layer.numHeads;
    return {
      uniforms: { ...attentionFields(plan, kv), ...masks.fields, scaleLog2e: plan.score.scale * Math.LOG2E },
      buffers: {
        qkv: args.q, // Q [B, H, Sq, Dh] (++ K ++ V)
        rowStats: { buffer: args.rowStats, size: B * H * Sq * 8 }, // (m, l) [B, H, Sq]
        probs: { buffer: args.probs, size: B * H * Sq * Skv * 4 }, // P [B, H, Sq, Skv]
        ...scoreBuffers(masks),
        kv: kv.buffer, // K ++ V [B, G, stride, Dh]
      },
      groups: [Math.ceil(Skv / TILE), Math.ceil(Sq / TILE), B * H],
    };
  },
});

export function attentionProbsPipeline(precision: Precision, scoreMod?: string): PipelineSpec {
  return kernelSpec(ATTENTION_PROBS, precision, { scoreMod, kvFormat: undefined });
}

export function encodeAttentionProbs(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: KvTarget; rowStats: GPUBuffer; probs: GPUBuffer },
  masks: MaskBuffers,
): void {
  encodeKernel(pass, scratch, ATTENTION_PROBS, { plan, ...buffers, masks });
}
