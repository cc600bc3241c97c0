// The optional inputs of the attention kernels, on the GPU: attnMask, key padding, head mask and
// packed-sequence offsets. What a call does not use is bound to one small zero buffer, so the
// kernels' bind group layouts never change.

import type { ForwardPlan } from '../../plan.ts';
import type { CallScratch } from '../scratch.ts';

/** What flash_attention.wgsl and attention_probs.wgsl take for "not allowed" (they test ≤ −1e38). */
const MASKED = -3.0e38;
/**
 * Finite mask values are raised to at least this: the kernels scale them by log2(e), which must not
 * overflow float32, and they must stay apart from MASKED (so −3.4e38, float32's lowest, which Hugging
 * Face uses for "masked", is added like any number, as PyTorch does). In float32 a score plus −1e37
 * is −1e37 whatever the score, as it is plus −3.4e38; only a row whose visible entries all lie below
 * −1e37 *and differ* could notice.
 */
const LOWEST_FINITE = -1.0e37;

export interface MaskBuffers {
  attnMask: GPUBuffer; // f32 [1 or B·H, Sq, Skv], MASKED where masked
  padding: GPUBuffer; // u32 [B, Skv], 1 = ignore this key
  headMask: GPUBuffer; // f32 [B·H]
  cuSeqlens: GPUBuffer; // u32 [B + 1]
  maskMode: number; // 0 none, 1 shared [Sq, Skv], 2 per (b, h)
  hasPadding: number;
  hasHeadMask: number;
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
          attnMask.map((v) => (v === -Infinity ? MASKED : Math.max(v, LOWEST_FINITE))),
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
    maskMode: attnMask ? (attnMaskPerHead ? 2 : 1) : 0,
    hasPadding: keyPaddingMask ? 1 : 0,
    hasHeadMask: headMask ? 1 : 0,
  };
}
