// Host side of shaders/output_projection.wgsl (+ the chosen GEMM core): O [B, H, S, Dh] read as concat(heads) [B·S, E], · W_Oᵀ + b_O → Y [B, S, E].

import source from '../../../shaders/output_projection.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { defineBindings, PARAMS_BINDING } from '../bindings.ts';
import { getPipeline, type PipelineSpec, specCache } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, shaderCode } from '../shader.ts';
import type { ProjectionVariant } from '../../types.ts';
import { largestSubgroup, subgroupEmulation } from '../variant-record.ts';
import { gemmShape } from '../variants.ts';
import { gemmLayout } from './gemm.ts';
import { type GpuWeight, formatKey, formatOf, GROUP_SHIFT_PARAM, groupShift, type WeightFormat, weightDecls, weightEntries, weightSource } from './packed-weight.ts';

/** output_projection.wgsl's uniforms. */
export const OUTPUT_PARAMS = defineParams([
  ['M', 'u32', 'rows: B·S'],
  ['N', 'u32', 'output columns: E'],
  ['S', 'u32', 'sequence length'],
  ['H', 'u32', 'heads'],
  ['Dh4', 'u32', 'head size / 4'],
  ['colLanes', 'u32', 'subgroup GEMM cores: invocations per row block (variants.ts gemmLayout)'],
  GROUP_SHIFT_PARAM,
]);

const W = weightDecls('W_O [N, E/4]');
const O = ['o', 'read-only-storage', 'array<ST4>', 'O [B, H, S, Dh/4]'] as const;
const BIAS = ['bias', 'read-only-storage', 'array<ST4>', 'b_O [N/4]'] as const;
const Y = ['y', 'storage', 'array<ST4>', 'Y [M, N/4]'] as const;

/** output_projection.wgsl's bindings. */
export const OUTPUT_BINDINGS = defineBindings('OutputProjection', [PARAMS_BINDING, O, W.float[0], BIAS, Y]);
/** The same with packed weights (packed-weight.ts): quants and scaleOffset in place of w. */
export const OUTPUT_PACKED_BINDINGS = defineBindings('OutputProjection.packed', [PARAMS_BINDING, O, W.packed[0], W.packed[1], BIAS, Y]);

const specs = specCache();

/** The pipeline of `variant` at this precision, for float weights or packed ones of `format` (built once per key). */
export function outputProjectionPipeline(precision: Precision, variant: ProjectionVariant, format: WeightFormat | null = null): PipelineSpec {
  return specs(`OutputProjection.${variant}|${precision}|lanes${subgroupEmulation.lanes}${formatKey(format)}`, () => {
    const gemm = gemmShape(variant);
    const weights = weightSource(format);
    const bindings = format ? OUTPUT_PACKED_BINDINGS : OUTPUT_BINDINGS;
    return {
      label: `OutputProjection.${variant}${format ? `.q${format.bits}` : ''}`,
      code: shaderCode({
        precision,
        subgroups: gemm.subgroups,
        params: OUTPUT_PARAMS,
        bindings,
        sizes: { ...gemm.sizes, ...weights.sizes },
        sources: [source, weights.source, gemm.core],
      }),
      constants: gemm.constants,
      bindings,
    };
  });
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
  const { batches: B, qRows: S } = plan.geometry; // varlen: one batch of T tokens
  const { embedDim: E, numHeads: H, headDim: Dh } = plan.layer;
  const M = B * S;
  const el = scratch.elementBytes;
  const gemm = gemmShape(variant);
  const layout = gemmLayout(gemm, Math.min(M, rowLimit), E, largestSubgroup(scratch.device));
  const format = formatOf(buffers.weight);
  const pipeline = getPipeline(scratch.device, outputProjectionPipeline(scratch.precision, variant, format));
  const params = scratch.uniforms(
    OUTPUT_PARAMS.pack({ M, N: E, S, H, Dh4: Dh / 4, colLanes: layout.colLanes, wGroupShift: groupShift(format) }),
    'OutputProjection.params',
  );
  const weight = format ? weightEntries(buffers.weight) : { w: { buffer: buffers.weight as GPUBuffer, size: E * H * Dh * el } }; // W_O [E, H·Dh] (H·Dh = E unless padded)
  const entries = {
    params,
    o: { buffer: buffers.attention, size: M * H * Dh * el }, // O [B, H, S, Dh]
    ...weight,
    bias: { buffer: buffers.bias, size: E * el }, // b_O [E]
    y: { buffer: buffers.y, size: M * E * el }, // Y [B, S, E]
  };
  const bindGroup = (format ? OUTPUT_PACKED_BINDINGS : OUTPUT_BINDINGS).group(scratch.device, entries as never);
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(...layout.groups);
}
