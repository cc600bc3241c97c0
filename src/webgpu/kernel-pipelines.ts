// Which compiled pipelines a kernel variant needs for a plan: what the scheduler compiles ahead, marks
// as run and asks about (tuning/scheduler.ts). One per weight format the kernel's dispatches read (q, k
// and v weights of different types take one QKV pipeline each).

import type { ForwardPlan } from '../plan/index.ts';
import type { Precision } from './buffers.ts';
import { flashAttentionPipeline } from './kernels/flash-attention.ts';
import { outputProjectionPipeline } from './kernels/output-projection.ts';
import { distinctFormats, formatsOf } from './kernels/packed-weight.ts';
import { qkvProjectionPipeline } from './kernels/qkv-projection.ts';
import type { PipelineSpec } from './pipelines.ts';
import type { AttentionVariant, KernelName, ProjectionVariant } from './variants.ts';

/** The pipelines `variant` of `kernel` needs for this plan on this device, at this precision. */
export function pipelinesOf(device: GPUDevice, precision: Precision, plan: ForwardPlan, kernel: KernelName, variant: string): readonly PipelineSpec[] {
  const formats = formatsOf(plan.layer);
  switch (kernel) {
    case 'qkv_projection':
      return distinctFormats(formats.qkv).map((format) => qkvProjectionPipeline(precision, variant as ProjectionVariant, format));
    case 'output_projection':
      return [outputProjectionPipeline(precision, variant as ProjectionVariant, formats.out)];
    case 'flash_attention':
      return [flashAttentionPipeline(device, precision, plan.layer.headDim, variant as AttentionVariant, plan.layer.scoreMod?.wgsl)];
  }
}
