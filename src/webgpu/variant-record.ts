// What a kernel variant is, as one declaration: a record. The GPU kernel set's records live in
// variants/ (variants/gemm.ts: GEMM cores, variants/flash-attention.ts: attention bodies), those written
// for CPU rasterizers in software/; variants.ts gathers both into the registry (and derives the public
// ProjectionVariant / AttentionVariant from their names) and holds the policy (built-in choices per
// adapter kind, tier 0). The kernels' host modules (kernels/) look a variant up there and know no
// adapter kind. Also here, as everything below the kernels needs them: the adapter kinds a record may
// win on, and the subgroup sizes a kernel is laid out for.
//
// A record says: its name (declared here once: the public types derive from it), its WGSL (imported
// `?raw` by the record's module), its tile geometry, its override constants, the features it needs, and
// the adapter kinds a sweep tries it on (`candidateOn`, from which variants.ts derives each kind's
// candidates). Its bindings are its kernel's (bindings.ts: every variant of a kernel binds the same buffers).

import type { Precision } from './buffers.ts';

/**
 * What kind of adapter runs the shaders, as far as choosing kernels goes:
 *   'unrolling-cpu'  lavapipe/llvmpipe: a CPU whose compiler unrolls constant loops and keeps small
 *                    arrays in registers (several rows per invocation win; barriers are costly)
 *   'jit-cpu'        SwiftShader: a CPU whose JIT keeps loop arrays in memory and runs both sides of every
 *                    branch (the attention kernel written out by the host wins)
 *   'cpu'            another CPU adapter (WARP, Microsoft Basic Render, unknown)
 *   'gpu'            a GPU (workgroup-memory tiles win)
 */
export type AdapterKind = 'unrolling-cpu' | 'jit-cpu' | 'cpu' | 'gpu';

/** The adapter kinds that are a CPU running the shaders: the only ones the software kernels (software/) are tried on. */
export const CPU_KINDS: readonly AdapterKind[] = ['unrolling-cpu', 'jit-cpu', 'cpu'];

export function adapterKind(info: { vendor: string; architecture: string; device: string; description: string }): AdapterKind {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.toLowerCase();
  if (/llvmpipe|lavapipe/.test(text)) return 'unrolling-cpu';
  if (/swiftshader/.test(text)) return 'jit-cpu';
  if (/microsoft basic render|warp|\bcpu\b|software/.test(text)) return 'cpu';
  return 'gpu';
}

/**
 * Where a sweep tries a variant: an adapter kind, or a kind only when the device lacks the `subgroups`
 * feature (there the subgroup variants that replace it are not offered).
 */
export type CandidateOn = AdapterKind | `${AdapterKind}:no-subgroups`;

/** What every variant record says. */
export interface VariantRecord<Name extends string = string> {
  /** The variant's name: the one declaration of it (the public ProjectionVariant / AttentionVariant derive from the records). */
  name: Name;
  /** Device features it needs: `subgroups` (then it is offered, and may be forced, only where the device has it). */
  features: { subgroups: boolean };
  /** The adapter kinds a sweep tries it on: those where it can win (measured; the record says why). */
  candidateOn: readonly CandidateOn[];
  /** Written for CPU rasterizers (src/webgpu/software/): tried on CPU kinds only. */
  software: boolean;
}

/** WGSL sources joined into one (a variant's own file after the shared files it uses: WGSL declarations may come in any order). */
export function joinSources(...sources: string[]): string {
  return sources.join('\n');
}

/** A GEMM core: appended to the problem file of qkv_projection or output_projection. */
export interface ProjectionRecord<Name extends string = string> extends VariantRecord<Name> {
  /** The core's WGSL, with the shared files it uses (the kernel's problem file comes with every variant). */
  core: string;
  /** `override` values (read when a pipeline is built: the subgroup cores take subgroupEmulation.lanes). */
  constants(): Record<string, number>;
  /** `const` sizes the core needs (private array lengths). */
  sizes?: Record<string, number>;
  /** Rows (M) and columns (N) of Y one workgroup covers. */
  tileRows: number;
  tileCols: number;
}

/** How a projection variant is built and dispatched (from its record). */
export interface GemmShape {
  /** The core appended to the problem file. */
  core: string;
  /** `override` values. */
  constants: Record<string, number>;
  /** Rows (M) and columns (N) of Y one workgroup covers. */
  tileRows: number;
  tileCols: number;
  /** The core uses subgroup operations (`enable subgroups;`). */
  subgroups: boolean;
  /** `const` sizes the core needs (private array lengths). */
  sizes?: Record<string, number>;
}

/** What an attention body is built with: its kernel's tiles on the device, and the common parts of the source. */
export interface AttentionBuild {
  precision: Precision;
  headDim: number;
  /** Query rows per workgroup, keys per tile, rows per invocation (flash-attention.ts flashTiles). */
  BR: number;
  BC: number;
  RPI: number;
  /** HAS_SCORE_MOD: 1 where the layer has a scoreMod. */
  hasScoreMod: number;
  /** The kernel's complete WGSL with `body` appended (prelude, Params, bindings, scoreMod, score rule, flash_attention.wgsl). */
  code(body: string, sizes: Record<string, number>, subgroups: boolean): string;
}

/** An attention body of flash_attention: "rows64-keys32-r4" = 64 query rows a workgroup, 32 keys a tile, 4 rows per invocation. */
export interface AttentionRecord<Name extends string = string> extends VariantRecord<Name> {
  /** Query rows per workgroup, keys per K/V tile (or per step), rows per invocation asked for. */
  rows: number;
  keys: number;
  rowsPerInvocation: number;
  /** The body's loops over the head size stay loops ("-loop"). */
  loop: boolean;
  /** The lanes of a subgroup share a row ("-sg"). */
  subgroup: boolean;
  /** K and V read from storage, the loops written out by the host ("-unrolled"). */
  unrolled: boolean;
  /** K/V rows loaded once per subgroup and shuffled to the lanes ("-shuffle"); the workgroup is whole subgroups. */
  shuffle: boolean;
  /** The shader and its override constants. */
  build(b: AttentionBuild): { code: string; constants: Record<string, number> };
}

/**
 * Tests only: subgroup kernels use at most this many lanes of each subgroup (0: all of them), the
 * others contributing nothing, so the size-dependent arithmetic runs as on an adapter with smaller
 * subgroups (an override constant, SUBGROUP_LANES: part of each pipeline's cache key).
 */
export const subgroupEmulation = { lanes: 0 };

/** The largest subgroup size of the device's adapter (128, the most WebGPU allows, where it does not say). */
export function largestSubgroup(device: GPUDevice): number {
  return (device.adapterInfo as (GPUAdapterInfo & { subgroupMaxSize?: number }) | undefined)?.subgroupMaxSize ?? 128;
}

/** Whether a record is offered to a sweep on this adapter kind (features aside). */
export function offeredOn(record: VariantRecord<string>, kind: AdapterKind, subgroups: boolean): boolean {
  return record.candidateOn.includes(kind) || (!subgroups && record.candidateOn.includes(`${kind}:no-subgroups`));
}
