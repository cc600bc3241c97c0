// Host side of shaders/output_gate.wgsl: the output gate (config.outputGate), O ← O ⊙ sigmoid(gate), both
// head-split [B, H, Sq, Dh]. The gate itself is projected by the QKV projection kernel (its weight in
// place of Q's, written to a buffer of its own: forward.ts encodeOutputGate).

import source from '../../../shaders/output_gate.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import { kernelBindings } from '../bindings.ts';
import type { Precision } from '../buffers.ts';
import { encodeKernel, kernelSpec, singleKernel } from '../kernel.ts';
import type { PipelineSpec } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';

export const OUTPUT_GATE_PARAMS = defineParams([['count4', 'u32', 'vec4s of O gated']]);

export const OUTPUT_GATE_BINDINGS = kernelBindings('OutputGate', [
  ['gate', 'read-only-storage', 'array<ST4>', 'x·W_gᵀ + b_g [B, H, Sq, Dh]'],
  ['attention', 'storage', 'array<ST4>', 'O [B, H, Sq, Dh], gated in place'],
]);

/** The gate as a kernel (kernel.ts): an invocation per vec4, one specialisation. */
export const OUTPUT_GATE = singleKernel({
  name: 'OutputGate',
  params: OUTPUT_GATE_PARAMS,
  bindings: OUTPUT_GATE_BINDINGS,
  source,
  run({ gate, attention, count }: { gate: GPUBuffer; attention: GPUBuffer; count: number }, scratch) {
    const groups = Math.ceil(count / 4 / 256);
    const bytes = count * scratch.elementBytes;
    return {
      uniforms: { count4: count / 4 },
      buffers: { gate: { buffer: gate, size: bytes }, attention: { buffer: attention, size: bytes } },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

export function outputGatePipeline(precision: Precision): PipelineSpec {
  return kernelSpec(OUTPUT_GATE, precision, {});
}

/** Encodes O ← O ⊙ sigmoid(gate) over the plan's attention output [batches, H, qRows, Dh] (Dh a multiple of 4: the GPU's padded heads). */
export function encodeOutputGateMultiply(pass: GPUComputePassEncoder, scratch: CallScratch, plan: ForwardPlan, gate: GPUBuffer, attention: GPUBuffer): void {
  const { batches, qRows } = plan.geometry;
  const { numHeads: H, headDim: Dh } = plan.layer;
  encodeKernel(pass, scratch, OUTPUT_GATE, { gate, attention, count: batches * H * qRows * Dh });
}
