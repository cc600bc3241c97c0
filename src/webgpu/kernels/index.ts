// The kernels (kernel.ts: each module here declares one or more `Kernel`s), and what the scheduler
// compiles ahead for a plan: the pipeline specs of a tunable kernel's variant (tuning/scheduler.ts
// reaches them through the backend, backend.ts).

import type { ForwardPlan } from '../../plan/index.ts';
import type { AttentionVariant, ProjectionVariant } from '../../types.ts';
import type { Precision } from '../buffers.ts';
import type { Kernel, Specialisation } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { KernelName } from '../variants.ts';
import { ACTIVATIONS_Q8 } from './activations-q8.ts';
import { ATTENTION_PROBS } from './attention-probs.ts';
import { COPY_ROWS, COPY_TENSOR } from './copy-tensor.ts';
import { DECODE_MERGE } from './decode-merge.ts';
import { FLASH_ATTENTION, flashAttentionPipeline } from './flash-attention.ts';
import { type KvFormat, kvFormatOf } from './attention-fields.ts';
import { HEAD_TRANSFORM } from './head-transform.ts';
import { KV_MOVE_SCALES, KV_STORE } from './kv-store.ts';
import { LINEAR_ATTENTION } from './linear-attention.ts';
import { OUTPUT_GATE } from './output-gate.ts';
import { OUTPUT_PROJECTION, outputProjectionPipeline } from './output-projection.ts';
import { PAGED_ATTENTION } from './paged-attention.ts';
import { PAGED_MOVE_SCALES, PAGED_QUANTIZE, PAGED_WRITE } from './paged-write.ts';
import { distinctFormats, formatsOf } from './packed-weight.ts';
import { QKV_PROJECTION, qkvProjectionPipeline } from './qkv-projection.ts';

/** Every kernel, in the order a forward runs them (the copies, which pad and crop, last). */
export const KERNELS: readonly Kernel<Specialisation, never>[] = [
  ACTIVATIONS_Q8,
  QKV_PROJECTION,
  HEAD_TRANSFORM,
  KV_STORE,
  FLASH_ATTENTION,
  DECODE_MERGE,
  ATTENTION_PROBS,
  LINEAR_ATTENTION,
  OUTPUT_GATE,
  OUTPUT_PROJECTION,
  PAGED_WRITE,
  PAGED_QUANTIZE,
  PAGED_MOVE_SCALES,
  PAGED_ATTENTION,
  COPY_TENSOR,
  COPY_ROWS,
  KV_MOVE_SCALES,
];

/**
 * The pipelines `variant` of `kernel` needs for this plan on this device: what the scheduler compiles
 * ahead, marks as run and asks about (tuning/scheduler.ts). One per weight format the kernel's
 * dispatches read (q, k and v weights of different types take one QKV pipeline each).
 */
export function pipelinesOf(device: GPUDevice, precision: Precision, plan: ForwardPlan, kernel: KernelName, variant: string): readonly PipelineSpec[] {
  const formats = formatsOf(plan.layer);
  switch (kernel) {
    case 'qkv_projection':
      return distinctFormats(formats.qkv).map((format) => qkvProjectionPipeline(precision, variant as ProjectionVariant, format));
    case 'output_projection':
      return [outputProjectionPipeline(precision, variant as ProjectionVariant, formats.out)];
    case 'flash_attention':
      return [flashAttentionPipeline(device, precision, plan.layer.headDim, variant as AttentionVariant, plan.layer.scoreMod?.wgsl, cacheFormat(plan, precision))];
  }
}

/** How the plan's KV cache keeps K and V, where not as the engine's tensors (attention-fields.ts KvFormat): the attention kernels are specialised by it. */
export function cacheFormat(plan: ForwardPlan, precision: Precision): KvFormat | undefined {
  return plan.cache ? kvFormatOf(plan.cache.cache.dtype, precision) : undefined;
}
