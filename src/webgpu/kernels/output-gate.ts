// Host side of shaders/output_gate.wgsl: config.outputGate's O ⊙ sigmoid(x·W_gᵀ + b_g) on the attention
// output, in place, between attention and the output projection. Only for layers with config.outputGate.

import source from '../../../shaders/output_gate.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import type { Precision } from '../buffers.ts';
import { kernelBindings } from '../bindings.ts';
import { encodeKernel, kernelSpec, singleKernel } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';

/** output_gate.wgsl's uniforms. */
export const GATE_PARAMS = defineParams([
  ['count', 'u32', 'invocations: tokens · H·Dh'],
  ['lanes', 'u32', 'H·Dh: the gated features of a token (the padded head size on padded layers)'],
  ['E4', 'u32', 'E / 4: vec4s of an input row and of a gate weight row'],
  ['S', 'u32', 'query rows per batch (Sq)'],
  ['heads', 'u32', 'H'],
  ['Dh', 'u32', 'head size (padded)'],
]);

/** output_gate.wgsl's bindings. */
export const GATE_BINDINGS = kernelBindings('OutputGate', [
  ['attention', 'storage', 'array<ST>', 'O [B, H, Sq, Dh], gated in place'],
  ['query', 'read-only-storage', 'array<ST4>', 'x [B·Sq, E/4]'],
  ['gateWeight', 'read-only-storage', 'array<ST4>', 'W_g [H·Dh, E/4]'],
  ['gateBias', 'read-only-storage', 'array<ST>', 'b_g [H·Dh]'],
]);

/** The gate's buffers on the GPU (webgpu/weights.ts uploads them with the layer). */
export interface GateWeights {
  weight: GPUBuffer;
  bias: GPUBuffer;
}

interface GateArgs {
  plan: ForwardPlan;
  attention: GPUBuffer;
  query: GPUBuffer;
  gate: GateWeights;
}

/** Up to 65535 workgroups of 64 along x, the rest along y. */
function flatGroups(count: number): [number, number] {
  const groups = Math.ceil(count / 64);
  return [Math.min(groups, 65535), Math.ceil(groups / 65535)];
}

/** The output gate as a kernel (kernel.ts): an invocation per (token, feature), one specialisation. */
export const OUTPUT_GATE = singleKernel({
  name: 'OutputGate',
  params: GATE_PARAMS,
  bindings: GATE_BINDINGS,
  source,
  run({ plan, attention, query, gate }: GateArgs) {
    const { numHeads: H, headDim: Dh, embedDim: E } = plan.layer;
    const { batches, qRows } = plan.geometry;
    const count = batches * qRows * H * Dh;
    return {
      uniforms: { count, lanes: H * Dh, E4: E / 4, S: qRows, heads: H, Dh },
      buffers: { attention, query, gateWeight: gate.weight, gateBias: gate.bias },
      groups: flatGroups(count),
    };
  },
});

export function outputGatePipeline(precision: Precision): PipelineSpec {
  return kernelSpec(OUTPUT_GATE, precision, {});
}

/** Encodes O ⊙= sigmoid(x·W_gᵀ + b_g) for a call's query tokens. */
export function encodeOutputGate(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: ForwardPlan,
  buffers: { attention: GPUBuffer; query: GPUBuffer; gate: GateWeights },
): void {
  encodeKernel(pass, scratch, OUTPUT_GATE, { plan, ...buffers });
}
