// A kernel is a type: the one contract every kernel host module (src/webgpu/kernels/) implements, and
// the two generic functions that do for all of them what each used to write by hand. In the spirit of
// ONNX Runtime Web's ProgramInfo + ProgramManager.run and ratchet's op traits, a kernel says
//   its name (`Owner`), its uniforms (shader.ts defineParams) and bindings (bindings.ts kernelBindings: the Params first),
//   its shader for a specialisation (WGSL files, sizes, subgroups, override constants),
//   and, for one dispatch's arguments: the specialisation they need, the uniform values, the buffers
//   by binding name and the workgroups;
// `kernelSpec` builds a specialisation's pipeline spec (once per key), and `encodeKernel` turns a kernel
// and one dispatch's arguments into a pipeline (pipelines.ts, cached per device), a uniform buffer, a
// bind group and `dispatchWorkgroups`. A new kernel is one module declaring a `Kernel` (defineKernel;
// singleKernel where it has one specialisation; kernels/projection.ts projectionKernel for a GEMM
// problem file), plus its WGSL; kernels/index.ts lists the kernels.
//
// The cache key is derived, never written: the kernel's name, the precision, the subgroup emulation's
// lanes and the specialisation record (primitives: variant, head size, tiles, weight bits, scoreMod
// text), field by field in name order. A specialisation therefore holds everything the kernel's shader
// depends on; what varies per call without changing the shader is a uniform.

import type { Bindings, BoundBuffer } from './bindings.ts';
import type { Precision } from './buffers.ts';
import { getPipeline, type PipelineSpec } from './pipelines.ts';
import type { CallScratch } from './scratch.ts';
import { type Params, shaderCode } from './shader.ts';
import { subgroupEmulation } from './variant-record.ts';

/** What a pipeline is specialised for: a small record of primitives (an undefined field is left out of the key). */
export type Specialisation = Readonly<Record<string, string | number | boolean | undefined>>;

/**
 * A kernel's WGSL for one specialisation: the files that follow the generated prelude, Params and
 * bindings (shader.ts shaderCode), with the sizes and features they need; or, where a variant record
 * writes the source itself (the flash attention bodies), the complete code.
 */
export type KernelShader = ({ sources: readonly string[]; sizes?: Record<string, number>; subgroups?: boolean } | { code: string }) & {
  /** Values of the shader's `override` constants. */
  constants?: Record<string, number>;
};

/**
 * One dispatch: its uniform values (packed into a uniform buffer of the call's scratch), or a uniform
 * buffer already written that several dispatches of a call share; its buffers by binding name
 * (`params` aside); its workgroups.
 */
export type KernelRun<P extends string> = {
  buffers: { readonly [name: string]: BoundBuffer };
  groups: readonly [x: number, y?: number, z?: number];
} & ({ uniforms: Record<P, number> } | { params: GPUBuffer });

/** The contract of a kernel: `S` its specialisation, `A` one dispatch's arguments, `P` its uniforms' names. */
export interface Kernel<S extends Specialisation, A, P extends string = string> {
  /** `Owner`: names its pipelines (with `label`), uniform buffers and bind groups; unique among kernels. */
  readonly name: string;
  /** Its uniform struct, bound first as `params` (bindings.ts kernelBindings). */
  readonly params: Params<P>;
  /** Its bindings for a specialisation (float or packed weights, one pass of several). */
  bindings(s: S): Bindings<string>;
  /** The pipeline's label, `Owner.variant…` (the name where left out). */
  label?(s: S): string;
  /** Its shader for a specialisation at a precision. */
  shader(s: S, precision: Precision): KernelShader;
  /** The specialisation one dispatch's arguments need on this device (variant, head size, the device's tiles…). */
  specialise(args: A, device: GPUDevice): S;
  /** One dispatch of these arguments (`s`: what specialise gave). */
  run(args: A, scratch: CallScratch, s: S): KernelRun<P>;
}

/** Declares a kernel (the identity: it lets TypeScript infer the specialisation, arguments and uniforms from the declaration). */
export function defineKernel<S extends Specialisation, A, P extends string>(kernel: Kernel<S, A, P>): Kernel<S, A, P> {
  return kernel;
}

/** What a kernel of one specialisation declares: one WGSL file (after the generated parts), one bindings declaration. */
interface SingleDeclaration<A, P extends string> {
  name: string;
  params: Params<P>;
  bindings: Bindings<string>;
  /** The WGSL file. */
  source: string;
  run(args: A, scratch: CallScratch): KernelRun<P>;
}

/** A kernel with a single specialisation (copies, the split-KV merge): its shader and bindings never vary. */
export function singleKernel<A, P extends string>(declaration: SingleDeclaration<A, P>): Kernel<Record<never, never>, A, P> {
  const { name, params, bindings, source, run } = declaration;
  return { name, params, bindings: () => bindings, shader: () => ({ sources: [source] }), specialise: () => ({}), run };
}

/** The cache key of a specialisation: everything the spec is built from, the specialisation's fields in name order. */
export function kernelKey(name: string, precision: Precision, s: Specialisation): string {
  const fields = Object.keys(s)
    .sort()
    .filter((field) => s[field] !== undefined)
    .map((field) => `${field}=${JSON.stringify(s[field])}`);
  return [name, precision, `lanes${subgroupEmulation.lanes}`, ...fields].join('|');
}

// Per kernel, its specs by key: built the first time a key is asked for (generating a kernel's WGSL
// costs more than a lookup, and a call asks several times), the same object every time after.
const specs = new WeakMap<object, Map<string, PipelineSpec>>();

/** The pipeline spec of `kernel` specialised to `s` at this precision (built once per key). */
export function kernelSpec<S extends Specialisation, A, P extends string>(kernel: Kernel<S, A, P>, precision: Precision, s: S): PipelineSpec {
  let cache = specs.get(kernel);
  if (!cache) {
    cache = new Map();
    specs.set(kernel, cache);
  }
  const key = kernelKey(kernel.name, precision, s);
  let spec = cache.get(key);
  if (!spec) {
    const bindings = kernel.bindings(s);
    const shader = kernel.shader(s, precision);
    const code =
      'code' in shader
        ? shader.code
        : shaderCode({ precision, subgroups: shader.subgroups, params: kernel.params, bindings, sizes: shader.sizes, sources: shader.sources });
    spec = { key, label: kernel.label?.(s) ?? kernel.name, code, ...(shader.constants ? { constants: shader.constants } : {}), bindings };
    cache.set(key, spec);
  }
  return spec;
}

/** Encodes one dispatch of `kernel`: its pipeline, its uniforms, a bind group of its buffers, its workgroups. */
export function encodeKernel<S extends Specialisation, A, P extends string>(pass: GPUComputePassEncoder, scratch: CallScratch, kernel: Kernel<S, A, P>, args: A): void {
  const device = scratch.device;
  const s = kernel.specialise(args, device);
  const spec = kernelSpec(kernel, scratch.precision, s);
  const pipeline = getPipeline(device, spec);
  const run = kernel.run(args, scratch, s);
  const params = 'params' in run ? run.params : scratch.uniforms(kernel.params.pack(run.uniforms), `${kernel.name}.params`);
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, spec.bindings.group(device, { params, ...run.buffers }));
  pass.dispatchWorkgroups(...run.groups);
}
