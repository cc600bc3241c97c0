// What the two projections (qkv-projection.ts, output-projection.ts) share as kernels (kernel.ts): a
// problem file with the chosen GEMM core appended (gemm.ts) and its weights' loads (packed-weight.ts),
// specialised by the core (the variant) and the packed weights' bits (float: none), bound with float
// or packed weights, labelled `Owner.variant[.qBITS]`; and how a GEMM of M × N is laid out on a device.

import type { ProjectionVariant } from '../../types.ts';
import type { Bindings } from '../bindings.ts';
import type { Kernel } from '../kernel.ts';
import type { Params } from '../shader.ts';
import { largestSubgroup } from '../variant-record.ts';
import { gemmLayout, gemmShape } from './gemm.ts';
import { formatOf, type GpuWeight, type WeightFormat, weightSource } from './packed-weight.ts';

/** What a projection's pipeline is specialised for: the GEMM core, and the packed weights' bits (undefined: float weights). */
export type ProjectionSpecialisation = { readonly variant: ProjectionVariant; readonly bits: WeightFormat['bits'] | undefined };

/** The specialisation of `variant` for weights of `format` (null: float; the group size is a uniform, so not part of it). */
export function projectionSpecialisation(variant: ProjectionVariant, format: WeightFormat | null): ProjectionSpecialisation {
  return { variant, bits: format?.bits };
}

/** What a projection declares; the rest of its Kernel is the same for both. */
interface ProjectionDeclaration<A, P extends string> {
  name: string;
  /** The problem file (loadA, store4; the core and the weights' loads are appended). */
  source: string;
  params: Params<P>;
  bindings: { float: Bindings<string>; packed: Bindings<string> };
  run: Kernel<ProjectionSpecialisation, A, P>['run'];
}

/** A projection kernel: one dispatch's arguments say the variant and the weight (float, or packed of some format). */
export function projectionKernel<A extends { variant: ProjectionVariant; weight: GpuWeight }, P extends string>(
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
    run,
  };
}

/** The layout of a projection's GEMM of M rows (the first `rowLimit` of them computed) and N columns on this device (gemm.ts gemmLayout). */
export function projectionLayout(variant: ProjectionVariant, device: GPUDevice, M: number, N: number, rowLimit: number): { colLanes: number; groups: [number, number] } {
  return gemmLayout(gemmShape(variant), Math.min(M, rowLimit), N, largestSubgroup(device));
}
