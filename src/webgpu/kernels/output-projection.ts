// Host side of shaders/output_projection.wgsl (+ the chosen GEMM core): O [B, H, S, Dh] read as concat(heads) [B·S, E], · W_Oᵀ + b_O → Y [B, S, E].

import source from '../../../shaders/output_projection.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { getPipeline, type PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, shaderCode } from '../shader.ts';
import { gemmLayout, gemmShape, largestSubgroup, type ProjectionVariant } from '../variants.ts';

/** output_projection.wgsl's uniforms. */
export const OUTPUT_PARAMS = defineParams([
  ['M', 'u32', 'rows: B·S'],
  ['N', 'u32', 'output columns: E'],
  ['S', 'u32', 'sequence length'],
  ['H', 'u32', 'heads'],
  ['Dh4', 'u32', 'head size / 4'],
  ['colLanes', 'u32', 'subgroup GEMM cores: invocations per row block (variants.ts gemmLayout)'],
]);

export function outputProjectionPipeline(precision: Precision, variant: ProjectionVariant): PipelineSpec {
  const gemm = gemmShape(variant);
  return {
    label: `OutputProjection.${variant}`,
    code: shaderCode({ precision, subgroups: gemm.subgroups, params: OUTPUT_PARAMS, sizes: gemm.sizes, sources: [source, gemm.core] }),
    constants: gemm.constants,
  };
}

export function encodeOutputProjection(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { attention: GPUBuffer; weight: GPUBuffer; bias: GPUBuffer; y: GPUBuffer },
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
  const pipeline = getPipeline(scratch.device, outputProjectionPipeline(scratch.precision, variant));
  const params = scratch.uniforms(OUTPUT_PARAMS.pack({ M, N: E, S, H, Dh4: Dh / 4, colLanes: layout.colLanes }), 'OutputProjection.params');
  const bindGroup = scratch.device.createBindGroup({
    label: 'OutputProjection.bindGroup',
    layout: pipeline.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: buffers.attention, size: M * H * Dh * el } }, // O [B, H, S, Dh]
      { binding: 2, resource: { buffer: buffers.weight, size: E * H * Dh * el } }, // W_O [E, H·Dh] (H·Dh = E unless padded)
      { binding: 3, resource: { buffer: buffers.bias, size: E * el } }, // b_O [E]
      { binding: 4, resource: { buffer: buffers.y, size: M * E * el } }, // Y [B, S, E]
    ],
  });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(...layout.groups);
}
