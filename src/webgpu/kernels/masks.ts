// The optional inputs of the attention kernels, on the GPU: attnMask, key padding, head mask, the
// per-head ALiBi slopes and sinks, and varlen offsets (cuSeqlens). What a call does not use is bound
// to one small zero buffer, so the kernels' bind group layouts never change.

import type { ForwardPlan } from '../../plan/index.ts';
import type { BindingDecl } from '../bindings.ts';
import type { CallScratch } from '../scratch.ts';
import { constant } from '../shader.ts';

/**
 * The uniform fields of the score rule (shaders/score_rule.wgsl), which every attention kernel's
 * Params declares so the shared WGSL functions can read them.
 */
export const SCORE_FIELDS = [
  ['causal', 'u32', "1: row i sees keys j ≤ i' (i' = i + Skv − Sq)"],
  ['window', 'u32', "> 0: row i sees keys i' − window < j ≤ i'"],
  ['maskMode', 'u32', '0: no attnMask; 1: one [Sq, Skv] for all; 2: [B·H, Sq, Skv]'],
  ['hasPadding', 'u32', '1: padding [B, Skv] applies'],
  ['hasHeadMask', 'u32', '1: headMask [B·H] applies'],
  ['softcapLog2', 'f32', '> 0: scores become c·tanh(s / c), c = softcap·log2(e); 0: no softcap'],
  ['hasAlibi', 'u32', '1: ALiBi slopes in headData[0 … H)'],
  ['hasSinks', 'u32', '1: sink logits in headData[H … 2H)'],
] as const;

/**
 * The score rule's bindings (shaders/score_rule.wgsl reads them), which every attention kernel's
 * bindings include. Per-head data is one buffer (WebGPU guarantees 8 storage buffers a stage, and the
 * flash kernel binds all 8): ALiBi slopes [H], sinks [H], then the head mask [B·H].
 */
export const SCORE_BINDINGS = [
  ['attnMask', 'read-only-storage', 'array<f32>', '[1 or B·H, Sq, Skv], MASKED where masked'],
  ['padding', 'read-only-storage', 'array<u32>', '[B, Skv], 1 = ignore this key'],
  ['headData', 'read-only-storage', 'array<f32>', '[2·H + B·H]: ALiBi slopes, sinks, head mask'],
] as const satisfies readonly BindingDecl[];

/** The score rule's buffers of a call, by binding name (SCORE_BINDINGS). */
export function scoreBuffers(masks: MaskBuffers): { attnMask: GPUBuffer; padding: GPUBuffer; headData: GPUBuffer } {
  return { attnMask: masks.attnMask, padding: masks.padding, headData: masks.headData };
}

export interface MaskBuffers {
  attnMask: GPUBuffer; // f32 [1 or B·H, Sq, Skv], MASKED where masked
  padding: GPUBuffer; // u32 [B, Skv], 1 = ignore this key
  cuSeqlens: GPUBuffer; // u32 [B + 1]
  headData: GPUBuffer; // f32 [2·H + B·H]: ALiBi slopes, sinks, head mask (zeros where absent)
  /** The values of SCORE_FIELDS for this call. */
  fields: {
    causal: number;
    window: number;
    maskMode: number;
    hasPadding: number;
    hasHeadMask: number;
    softcapLog2: number;
    hasAlibi: number;
    hasSinks: number;
  };
}

function upload(scratch: CallScratch, data: Float32Array | Uint32Array, role: string): GPUBuffer {
  const buffer = scratch.storage(data.byteLength, role);
  scratch.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
  return buffer;
}

/** ALiBi slopes [H], sinks [H], then the head mask [B·H] (zeros where absent), as score_rule.wgsl reads them. */
function headData(plan: ForwardPlan): Float32Array {
  const H = plan.layer.numHeads;
  const { headMask } = plan.masks;
  const out = new Float32Array(2 * H + (headMask?.length ?? 0));
  if (plan.score.alibiSlopes) out.set(plan.score.alibiSlopes, 0);
  if (plan.score.sinks) out.set(plan.score.sinks, H);
  if (headMask) out.set(headMask, 2 * H);
  return out;
}

export function uploadMasks(scratch: CallScratch, plan: ForwardPlan): MaskBuffers {
  const { attnMask, attnMaskPerHead, keyPaddingMask, headMask } = plan.masks;
  const { alibiSlopes, sinks } = plan.score;
  let dummy: GPUBuffer | null = null;
  const none = () => (dummy ??= upload(scratch, new Uint32Array(4), 'noMask'));
  return {
    // −Infinity (a float mask's "never") and true (a bool mask's) become MASKED: WGSL has no infinities.
    attnMask: attnMask
      ? upload(
          scratch,
          attnMask.map((v) => (v === -Infinity ? constant('MASKED') : Math.max(v, constant('LOWEST_MASK_VALUE')))),
          'attnMask',
        )
      : none(),
    padding: keyPaddingMask
      ? upload(
          scratch,
          Uint32Array.from(keyPaddingMask, (v) => (v ? 1 : 0)),
          'keyPaddingMask',
        )
      : none(),
    cuSeqlens: plan.cuSeqlens ? upload(scratch, Uint32Array.from(plan.cuSeqlens), 'cuSeqlens') : none(),
    headData: headMask || alibiSlopes || sinks ? upload(scratch, headData(plan), 'headData') : none(),
    fields: {
      causal: plan.isCausal ? 1 : 0,
      window: plan.masks.window,
      maskMode: attnMask ? (attnMaskPerHead ? 2 : 1) : 0,
      hasPadding: keyPaddingMask ? 1 : 0,
      hasHeadMask: headMask ? 1 : 0,
      softcapLog2: plan.score.softcap * Math.LOG2E,
      hasAlibi: alibiSlopes ? 1 : 0,
      hasSinks: sinks ? 1 : 0,
    },
  };
}
