// The optional inputs of the attention kernels, on the GPU: attnMask, key padding, head mask and
// varlen offsets (cuSeqlens). What a call does not use is bound to one small zero buffer, so the
// kernels' bind group layouts never change.

import type { ForwardPlan } from '../../plan/index.ts';
import type { CallScratch } from '../scratch.ts';
import { constant } from '../shader.ts';

/**
 * The uniform fields of the score rule (shaders/score_rule.wgsl), which every attention kernel's
 * Params declares so the shared WGSL functions can read them.
 */
export const MASK_FIELDS = [
  ['causal', 'u32', "1: row i sees keys j ≤ i' (i' = i + Skv − Sq)"],
  ['window', 'u32', "> 0: row i sees keys i' − window < j ≤ i'"],
  ['maskMode', 'u32', '0: no attnMask; 1: one [Sq, Skv] for all; 2: [B·H, Sq, Skv]'],
  ['hasPadding', 'u32', '1: padding [B, Skv] applies'],
  ['hasHeadMask', 'u32', '1: headMask [B·H] applies'],
] as const;

export interface MaskBuffers {
  attnMask: GPUBuffer; // f32 [1 or B·H, Sq, Skv], MASKED where masked
  padding: GPUBuffer; // u32 [B, Skv], 1 = ignore this key
  headMask: GPUBuffer; // f32 [B·H]
  cuSeqlens: GPUBuffer; // u32 [B + 1]
  /** The values of MASK_FIELDS for this call. */
  fields: { causal: number; window: number; maskMode: number; hasPadding: number; hasHeadMask: number };
}

function upload(scratch: CallScratch, data: Float32Array | Uint32Array, role: string): GPUBuffer {
  const buffer = scratch.storage(data.byteLength, role);
  scratch.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
  return buffer;
}

export function uploadMasks(scratch: CallScratch, plan: ForwardPlan): MaskBuffers {
  const { attnMask, attnMaskPerHead, keyPaddingMask, headMask } = plan.masks;
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
    headMask: headMask ? upload(scratch, headMask, 'headMask') : none(),
    cuSeqlens: plan.cuSeqlens ? upload(scratch, Uint32Array.from(plan.cuSeqlens), 'cuSeqlens') : none(),
    fields: {
      causal: plan.isCausal ? 1 : 0,
      window: plan.masks.window,
      maskMode: attnMask ? (attnMaskPerHead ? 2 : 1) : 0,
      hasPadding: keyPaddingMask ? 1 : 0,
      hasHeadMask: headMask ? 1 : 0,
    },
  };
}
