// What the two projections (qkv-projection.ts, output-projection.ts) share as kernels (kernel.ts): a
// problem file with the chosen GEMM core appended (gemm.ts) and its weights' loads (packed-weight.ts),
// specialised by the core (the variant) and the packed weights' bits (float: none), bound with float
// or packed weights, labelled `Owner.variant[.qBITS]`; the uniforms the cores and the weights' loads
// read, which the kernel fills in, with the workgroups, from how a GEMM of M × N is laid out on the
// device (a projection's run says M and N, its other uniforms and its buffers).

import type { ProjectionVariant } from '../../types.ts';
import { type BindingDecl, type Bindings, type BoundBuffer, kernelBindings } from '../bindings.ts';
import type { Kernel } from '../kernel.ts';
import type { CallScratch } from '../scratch.ts';
import type { Params } from '../shader.ts';
import { largestSubgroup } from '../variant-record.ts';
import { gemmShape } from '../variants.ts';
import { gemmLayout } from './gemm.ts';
import { formatOf, type GpuWeight, GROUP_SHIFT_PARAM, groupShift, type WeightFormat, weightDecls, weightSource } from './packed-weight.ts';

/** What a projection's pipeline is specialised for: the GEMM core, and the packed weights' bits (undefined: float weights). */
export type ProjectionSpecialisation = { readonly variant: ProjectionVariant; readonly bits: WeightFormat['bits'] | undefined };

/** The specialisation of `variant` for weights of `format` (null: float; the group size is a uniform, so not part of it). */
export function projectionSpecialisation(variant: ProjectionVariant, format: WeightFormat | null): ProjectionSpecialisation {
  return { variant, bits: format?.bits };
}

/** The uniforms both projections' Params begin with: the GEMM's size, the subgroup cores' lanes per row block, the packed weights' group. */
export const GEMM_FIELDS = [
  ['M', 'u32', 'rows: B·S'],
  ['N', 'u32', 'columns of this dispatch (rows of W used)'],
  ['colLanes', 'u32', 'subgroup GEMM cores: invocations per row block (variants.ts gemmLayout)'],
  GROUP_SHIFT_PARAM,
] as const;

/**
 * A projection's bindings, with float weights and with packed ones (packed-weight.ts: quants and
 * scaleOffset in place of w): its Params, its input A (read), the weight W, the bias, its output (written),
 * each tensor of the engine's precision (ST4); a name and its shape comment, or the shape alone.
 */
export function projectionBindings(
  name: string,
  input: readonly [name: string, meaning: string],
  weight: string,
  bias: string,
  output: readonly [name: string, meaning: string],
): { float: Bindings<string>; packed: Bindings<string> } {
  const W = weightDecls(weight);
  const A: BindingDecl = [input[0], 'read-only-storage', 'array<ST4>', input[1]];
  const b: BindingDecl = ['bias', 'read-only-storage', 'array<ST4>', bias];
  const Y: BindingDecl = [output[0], 'storage', 'array<ST4>', output[1]];
  return { float: kernelBindings(name, [A, ...W.float, b, Y]), packed: kernelBindings(`${name}.packed`, [A, ...W.packed, b, Y]) };
}

/** The names of GEMM_FIELDS (projectionKernel fills them in). */
type GemmField = (typeof GEMM_FIELDS)[number][0];

/** One projection dispatch as its module says it: the GEMM's M and N, its other uniforms, its buffers (the layout is the same for both). */
interface ProjectionRun<P extends string> {
  M: number;
  N: number;
  uniforms: Record<Exclude<P, GemmField>, number>;
  buffers: { readonly [name: string]: BoundBuffer };
}

/** What a projection declares; the rest of its Kernel is the same for both. */
interface ProjectionDeclaration<A, P extends string> {
  name: string;
  /** The problem file (loadA, store4; the core and the weights' loads are appended). */
  source: string;
  params: Params<P>;
  bindings: { float: Bindings<string>; packed: Bindings<string> };
  run(args: A, scratch: CallScratch): ProjectionRun<P>;
}

/** A projection kernel: one dispatch's arguments say the variant and the weight (float, or packed of some format). */
export function projectionKernel<A extends { variant: ProjectionVariant; weight: GpuWeight; rowLimit: number }, P extends string>(
  declaration: ProjectionDeclaration<A, P>,
): Kernel<ProjectionSpecialisation, A, P> {
  const { name, source, params, bindings, run } = declaration;
  return {
    name,
    params,
    bindings: (s) => (s.bits ? bindings.packed : bindings.float),
    label: (s) => `${name}.${s.variant}${s.bits ? `.q${s.bits}` : ''}`,
    shader: (s) => {
      const gemm = gemmShape(s.variant);
      const weights = weightSource(s.bits);
      return { subgroups: gemm.subgroups, sizes: { ...gemm.sizes, ...weights.sizes }, sources: [source, weights.source, gemm.core], constants: gemm.constants };
    },
    specialise: (args) => projectionSpecialisation(args.variant, formatOf(args.weight)),
    run(args, scratch) {
      const { M, N, uniforms, buffers } = run(args, scratch);
      const layout = projectionLayout(args, scratch.device, M, N);
      return { uniforms: { ...layout.fields, ...uniforms } as Record<P, number>, buffers, groups: layout.groups };
    },
  };
}

/**
 * A projection's GEMM of M rows (the first `rowLimit` of them computed) and N columns on this device,
 * reading `weight`: its workgroups (gemm.ts gemmLayout) and the values of GEMM_FIELDS.
 */
function projectionLayout(
  args: { variant: ProjectionVariant; weight: GpuWeight; rowLimit: number },
  device: GPUDevice,
  M: number,
  N: number,
): { groups: [number, number]; fields: Record<GemmField, number> } {
  const layout = gemmLayout(gemmShape(args.variant), Math.min(M, args.rowLimit), N, largestSubgroup(device));
  return { groups: layout.groups, fields: { M, N, colLanes: layout.colLanes, wGroupShift: groupShift(formatOf(args.weight)) } };
}
