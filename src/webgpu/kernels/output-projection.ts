// Host side of shaders/output_projection.wgsl (+ the chosen GEMM core): O [B, H, S, Dh] read as concat(heads) [B·S, H·Dh], · W_Oᵀ + b_O → Y [B, S, E].

import source from '../../../shaders/output_projection.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { ProjectionVariant } from '../../types.ts';
import type { Precision } from '../buffers.ts';
import { encodeKernel, kernelSpec } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, pick } from '../shader.ts';
import { ATTENTION_FIELDS } from './attention-fields.ts';
import { formatOf, type GpuWeight, type WeightFormat, weightEntries } from './packed-weight.ts';
import { GEMM_FIELDS, projectionBindings, projectionKernel, projectionSpecialisation } from './projection.ts';

/** output_projection.wgsl's uniforms. */
export const OUTPUT_PARAMS = defineParams([...GEMM_FIELDS, ['S', 'u32', 'sequence length'], ...pick(ATTENTION_FIELDS, 'H', 'Dh4')]);

const BINDINGS = projectionBindings('OutputProjection', ['o', 'O [B, H, S, Dh/4]'], 'W_O [N, H·Dh/4]', 'b_O [N/4]', ['y', 'Y [M, N/4]']);
/** output_projection.wgsl's bindings. */
export const OUTPUT_BINDINGS = BINDINGS.float;
/** The same with packed weights (packed-weight.ts): quants and scaleOffset in place of w. */
export const OUTPUT_PACKED_BINDINGS = BINDINGS.packed;

/** One dispatch: the plan, the variant, O, W_O (float or packed), b_O and Y, and the rows computed. */
interface OutputArgs {
  plan: ForwardPlan;
  variant: ProjectionVariant;
  attention: GPUBuffer;
  weight: GpuWeight;
  bias: GPUBuffer;
  y: GPUBuffer;
  rowLimit: number;
}

/** The output projection as a kernel (kernel.ts): one dispatch over all B·S rows and E columns. */
export const OUTPUT_PROJECTION = projectionKernel({
  name: 'OutputProjection',
  source,
  params: OUTPUT_PARAMS,
  bindings: BINDINGS,
  run(args: OutputArgs, scratch) {
    const { batches: B, qRows: S } = args.plan.geometry; // varlen: one batch of T tokens
    const { embedDim: E, numHeads: H, headDim: Dh } = args.plan.layer;
    const M = B * S;
    const el = scratch.elementBytes;
    const weight = formatOf(args.weight) ? weightEntries(args.weight) : { w: { buffer: args.weight as GPUBuffer, size: E * H * Dh * el } }; // W_O [E, H·Dh] (H·Dh ≠ E with config.headDim, or padded)
    return {
      M,
      N: E,
      uniforms: { S, H, Dh4: Dh / 4 },
      buffers: {
        o: { buffer: args.attention, size: M * H * Dh * el }, // O [B, H, S, Dh]
        ...weight,
        bias: { buffer: args.bias, size: E * el }, // b_O [E]
        y: { buffer: args.y, size: M * E * el }, // Y [B, S, E]
      },
    };
  },
});

/** The pipeline of `variant` at this precision, for float weights or packed ones of `format` (built once per key). */
export function outputProjectionPipeline(precision: Precision, variant: ProjectionVariant, format: WeightFormat | null = null): PipelineSpec {
  return kernelSpec(OUTPUT_PROJECTION, precision, projectionSpecialisation(variant, format));
}

export function encodeOutputProjection(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { attention: GPUBuffer; weight: GpuWeight; bias: GPUBuffer; y: GPUBuffer },
  variant: ProjectionVariant,
  /** The tuner's timing trials: compute only the first `rowLimit` token rows. */
  rowLimit = Infinity,
): void {
  encodeKernel(pass, scratch, OUTPUT_PROJECTION, { plan, variant, ...buffers, rowLimit });
}
