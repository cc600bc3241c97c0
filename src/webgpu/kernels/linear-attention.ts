// Host side of linear attention (config.attention = 'linear', engine.linearAttention): Q, K, V
// (head-split, as the softmax kernels read them) → O [B, H, Sq, Dh] in O(S·Dh²), never an S×S matrix.
// Three passes (shaders/linear_state.wgsl, linear_prefix.wgsl, linear_attention.wgsl): each chunk
// of CHUNK keys summed as a Dh×Dh matrix and a vector, the sums turned into prefix sums along the
// chunks, then each query row reads the sums before its chunk and adds its own chunk's keys one by
// one. A call with few query rows (a decode step) skips the sums and loops over its keys directly,
// as does one whose sums would not fit a storage binding.

import prefixSource from '../../../shaders/linear_prefix.wgsl?raw';
import outputSource from '../../../shaders/linear_attention.wgsl?raw';
import stateSource from '../../../shaders/linear_state.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, pick } from '../shader.ts';
import { ATTENTION_FIELDS, attentionFields, KV_BINDING, OUT_BINDING } from './attention-fields.ts';
import { type MaskBuffers, SCORE_BINDINGS, SCORE_FIELDS } from './masks.ts';
import type { KvTarget } from './qkv-projection.ts';

/** The three kernels' uniforms (one struct). */
export const LINEAR_PARAMS = defineParams([
  ...ATTENTION_FIELDS,
  ...pick(SCORE_FIELDS, 'causal', 'hasPadding'), // which keys a row sums, as the softmax kernels' score rule says
  ['chunks', 'u32', 'chunks of CHUNK keys with sums in state; 0: direct (no state)'],
  ['eps', 'f32', 'added to the denominator'],
  ['features', 'u32', "the caller's head size: φ(q) is 0 past it (padded heads, padding.ts)"],
]);

/** Keys per chunk: a query row adds up to this many keys one by one besides reading the sums. */
export const CHUNK = 64;
/** Calls with at most this many query rows loop over their keys directly (O(Sq·Skv·Dh) beats O(Skv·Dh²) there). */
const DIRECT_ROWS = 16;

type Pass = 'state' | 'prefix' | 'output';
const SOURCES: Record<Pass, string> = { state: stateSource, prefix: prefixSource, output: outputSource };

/** Each pass's bindings (one Params struct for the three). */
export const LINEAR_BINDINGS = {
  state: kernelBindings('LinearAttention.state', [
    KV_BINDING,
    ...pick(SCORE_BINDINGS, 'padding'),
    ['state', 'storage', 'array<vec4<f32>>', "each chunk's sums [B·G, chunks + 1, Dh + 1, Dh/4]"],
  ]),
  prefix: kernelBindings('LinearAttention.prefix', [['state', 'storage', 'array<vec4<f32>>', '[B·G, chunks + 1, Dh + 1, Dh/4], summed in place']]),
  output: kernelBindings('LinearAttention.output', [
    ['q', 'read-only-storage', 'array<ST4>', 'Q [B, H, Sq, Dh/4]'],
    KV_BINDING,
    ...pick(SCORE_BINDINGS, 'padding'),
    ['state', 'read-only-storage', 'array<vec4<f32>>', 'prefix sums [B·G, chunks + 1, Dh + 1, Dh/4] (unread when direct)'],
    OUT_BINDING,
  ]),
} as const;

/** One dispatch: which pass, the plan, the Params the three passes share (written once a call), the buffers they read and write. */
interface LinearArgs {
  pass: Pass;
  plan: ForwardPlan;
  params: GPUBuffer;
  q: GPUBuffer;
  kv: GPUBuffer;
  padding: GPUBuffer;
  state: GPUBuffer;
  attention: GPUBuffer;
  chunks: number;
}

/** Linear attention as a kernel (kernel.ts): three passes, each its own shader and bindings, specialised by the head size. */
export const LINEAR_ATTENTION = defineKernel({
  name: 'LinearAttention',
  params: LINEAR_PARAMS,
  specialise: (args: LinearArgs) => ({ pass: args.pass, headDim: args.plan.layer.headDim }),
  bindings: (s) => LINEAR_BINDINGS[s.pass],
  label: (s) => `LinearAttention.${s.pass}`,
  shader: (s) => ({ sizes: { DH4: s.headDim / 4, CHUNK }, sources: [SOURCES[s.pass]] }),
  run({ pass, plan, params, kv, padding, state, ...args }) {
    const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
    const { batches } = plan.geometry;
    // Output: a workgroup per 64 query rows, per head, per batch.
    if (pass === 'output') return { params, buffers: { q: args.q, kv, padding, state, out: args.attention }, groups: [Math.ceil(plan.seqLen / 64), H, batches] };
    // The sums: a workgroup per 64 vec4s of a chunk's (Dh + 1) × Dh/4 slot, per chunk (state; prefix runs along them), per (b, g).
    const slotVec4s = (Dh + 1) * (Dh / 4);
    const sums: Record<string, GPUBuffer> = pass === 'state' ? { kv, padding, state } : { state };
    return { params, buffers: sums, groups: [Math.ceil(slotVec4s / 64), pass === 'state' ? args.chunks : 1, batches * G] };
  },
});

export function linearAttentionPipeline(precision: Precision, headDim: number, pass: Pass): PipelineSpec {
  return kernelSpec(LINEAR_ATTENTION, precision, { pass, headDim });
}

/** Chunks with sums for this call, or 0 for the direct loop. */
export function linearChunks(plan: ForwardPlan, maxBinding: number): number {
  const { numKvHeads: G, headDim: Dh } = plan.layer;
  const chunks = Math.ceil(plan.kvSeqLen / CHUNK);
  const stateBytes = plan.geometry.batches * G * (chunks + 1) * (Dh + 1) * Dh * 4;
  return plan.seqLen <= DIRECT_ROWS || stateBytes > maxBinding ? 0 : chunks;
}

export function encodeLinearAttention(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { q: GPUBuffer; kv: KvTarget; attention: GPUBuffer },
  masks: MaskBuffers,
): void {
  const { numKvHeads: G, headDim: Dh } = plan.layer;
  const { batches } = plan.geometry;
  const { kv } = buffers;
  const device = scratch.device;
  const chunks = linearChunks(plan, Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize));
  const params = scratch.uniforms(
    LINEAR_PARAMS.pack({
      ...attentionFields(plan, kv),
      causal: plan.isCausal ? 1 : 0,
      hasPadding: masks.fields.hasPadding,
      chunks,
      eps: plan.score.eps,
      features: plan.layer.unpaddedHeadDim ?? Dh,
    }),
    'LinearAttention.params',
  );
  const state = chunks > 0 ? scratch.storage(batches * G * (chunks + 1) * (Dh + 1) * (Dh / 4) * 16, 'linearState') : masks.padding; // unread when direct
  const args = { plan, params, q: buffers.q, kv: kv.buffer, padding: masks.padding, state, attention: buffers.attention, chunks };
  // The sums (each chunk's, then their prefix along the chunks) where there are chunks; the output reads them, or loops over its keys.
  const passes: readonly Pass[] = chunks > 0 ? ['state', 'prefix', 'output'] : ['output'];
  for (const which of passes) encodeKernel(pass, scratch, LINEAR_ATTENTION, { ...args, pass: which });
}
