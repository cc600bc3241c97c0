// The kernel variants the engine chooses between: the registry (every variant's record, GPU kernel set
// and software ones gathered here, the only module that imports both), the public variant names derived
// from the records, and the policy (the built-in final choice per adapter kind, tier 0, and each kind's
// candidates, derived from the records' `candidateOn`). The kernels' host modules (kernels/) look their
// variant up here (gemmShape, attentionRecord, attentionShape) and know no adapter kind.
//
//   projection (qkv_projection, output_projection): which GEMM core is appended to the problem file
//     records in variants/gemm.ts (those written for CPU rasterizers in software/gemm.ts)
//   attention (flash_attention): which body is appended to flash_attention.wgsl
//     records in variants/flash-attention.ts (those written for CPU rasterizers in software/flash-attention.ts)
//
// A variant is one record (variant-record.ts): its WGSL, tiles, override constants, the features it
// needs and the adapter kinds a sweep tries it on. The software variants (software/) are tried only on
// CPU adapters: a sweep on a GPU compiles none of them.
//
// Subgroup variants are offered (candidates) and may be forced only where the device has the
// `subgroups` feature (webgpu/device.ts requests it where the adapter has it); they are correct at any
// subgroup size, and the tests also run them as if the subgroup were smaller (subgroupEmulation).
//
// Compile cost is a cost: drivers compile WGSL through LLVM (lavapipe, SwiftShader), FXC/DXC or the
// GPU vendor's compiler, and written-out tiles and unrolled loops run fast but compile slowly (the
// docs/PERFORMANCE.md has the figures). So a first call runs tier 0, which compiles fast.
//
// Nothing here may import types.ts (or anything that does): tuning-types.ts derives the public variant
// names from the records below, and check-cycles counts type-only imports.

import { gemmLayout } from './kernels/gemm.ts';
import { SOFTWARE_ATTENTION_RECORDS } from './software/flash-attention.ts';
import { SOFTWARE_PROJECTION_RECORDS } from './software/gemm.ts';
import {
  type AdapterKind,
  type AttentionRecord,
  adapterKind,
  CPU_KINDS,
  type GemmShape,
  largestSubgroup,
  offeredOn,
  type ProjectionRecord,
  subgroupEmulation,
  type VariantRecord,
} from './variant-record.ts';
import { GPU_ATTENTION_RECORDS } from './variants/flash-attention.ts';
import { GPU_PROJECTION_RECORDS } from './variants/gemm.ts';

export type { AdapterKind, GemmShape };
export { adapterKind, CPU_KINDS, gemmLayout, largestSubgroup, subgroupEmulation };

/** Every projection variant's record (GEMM cores), in the registry's order: the GPU kernel set's, then the software ones. */
export const PROJECTION_RECORDS = [...GPU_PROJECTION_RECORDS, ...SOFTWARE_PROJECTION_RECORDS] as const;
/** Every attention variant's record (flash_attention bodies), in the registry's order. */
export const ATTENTION_RECORDS = [...GPU_ATTENTION_RECORDS, ...SOFTWARE_ATTENTION_RECORDS] as const;

/**
 * A GEMM core of the projections (qkv_projection, output_projection): the names of the records.
 * @useDeclaredType
 */
export type ProjectionVariant = (typeof PROJECTION_RECORDS)[number]['name'];
/**
 * An attention body of flash_attention: the names of the records.
 * @useDeclaredType
 */
export type AttentionVariant = (typeof ATTENTION_RECORDS)[number]['name'];

export const PROJECTION_VARIANTS: readonly ProjectionVariant[] = PROJECTION_RECORDS.map((r) => r.name);
export const ATTENTION_VARIANTS: readonly AttentionVariant[] = ATTENTION_RECORDS.map((r) => r.name);

// A software variant is tried on CPU adapters only (the records say where; this holds them to it).
for (const record of [...PROJECTION_RECORDS, ...ATTENTION_RECORDS] as readonly VariantRecord[]) {
  if (record.software && record.candidateOn.some((on) => !CPU_KINDS.includes(on.split(':')[0] as AdapterKind))) {
    throw new Error(`variants: ${record.name} is a software variant (src/webgpu/software/), a candidate on CPU adapters only`);
  }
}

const PROJECTIONS = new Map<string, ProjectionRecord<ProjectionVariant>>(PROJECTION_RECORDS.map((r) => [r.name, r]));
const ATTENTIONS = new Map<string, AttentionRecord<AttentionVariant>>(ATTENTION_RECORDS.map((r) => [r.name, r]));

/** The record of a projection variant. */
export function projectionRecord(variant: ProjectionVariant): ProjectionRecord<ProjectionVariant> {
  const record = PROJECTIONS.get(variant);
  if (!record) throw new Error(`no projection variant ${variant}`);
  return record;
}

/** The record of an attention variant. */
export function attentionRecord(variant: AttentionVariant): AttentionRecord<AttentionVariant> {
  const record = ATTENTIONS.get(variant);
  if (!record) throw new Error(`no attention variant ${variant}`);
  return record;
}

/** How projection `variant` is built and dispatched. */
export function gemmShape(variant: ProjectionVariant): GemmShape {
  const r = projectionRecord(variant);
  return { core: r.core, constants: r.constants(), tileRows: r.tileRows, tileCols: r.tileCols, subgroups: r.features.subgroups, ...(r.sizes ? { sizes: r.sizes } : {}) };
}

/** Query rows per workgroup, keys per tile, rows per invocation asked for, and the body's kind, of an attention variant. */
export function attentionShape(variant: AttentionVariant): Pick<AttentionRecord, 'rows' | 'keys' | 'rowsPerInvocation' | 'loop' | 'subgroup' | 'unrolled' | 'shuffle'> {
  const { rows, keys, rowsPerInvocation, loop, subgroup, unrolled, shuffle } = attentionRecord(variant);
  return { rows, keys, rowsPerInvocation, loop, subgroup, unrolled, shuffle };
}

/** The record of a variant of either kind. */
export function recordOf(variant: string): VariantRecord {
  return PROJECTIONS.get(variant) ?? attentionRecord(variant as AttentionVariant);
}

/** Whether a variant uses subgroup operations (so needs a device with the `subgroups` feature). */
export function needsSubgroups(variant: string): boolean {
  return recordOf(variant).features.subgroups;
}

/** Whether a variant was written for CPU rasterizers (src/webgpu/software/): never a candidate on a GPU. */
export function isSoftwareVariant(variant: string): boolean {
  return recordOf(variant).software;
}

/** One variant per kernel: what a forward runs. */
export interface KernelChoice {
  qkv_projection: ProjectionVariant;
  flash_attention: AttentionVariant;
  output_projection: ProjectionVariant;
}
export type KernelName = keyof KernelChoice;
export const KERNEL_NAMES: readonly KernelName[] = ['qkv_projection', 'flash_attention', 'output_projection'];

/** Of `kernels`, those a call of `plan` runs: linear attention has no flash_attention (its own kernels compile in line, untuned). */
export function kernelsOf(plan: { layer: { attention: 'softmax' | 'linear' } }, kernels: readonly KernelName[]): readonly KernelName[] {
  return plan.layer.attention === 'linear' ? kernels.filter((k) => k !== 'flash_attention') : kernels;
}

/** The variants of each kernel. */
export const VARIANTS: { readonly [K in KernelName]: readonly KernelChoice[K][] } = {
  qkv_projection: PROJECTION_VARIANTS,
  flash_attention: ATTENTION_VARIANTS,
  output_projection: PROJECTION_VARIANTS,
};

/** Adapters that are a CPU running the shaders (lavapipe, SwiftShader, WARP): barriers cost, loads are gathers. */
export function isCpuAdapter(info: { vendor: string; architecture: string; device: string; description: string }): boolean {
  return adapterKind(info) !== 'gpu';
}

/**
 * Query rows per sequence up to which lavapipe's built-in attention is the subgroup kernel whose lanes
 * share a row (rows16-keys32-sg): decode steps and short speculative blocks; past it, up to
 * SHORT_QUERY_ROWS, the 2-row shuffle kernel (64 rows a workgroup), then the 4-row one (128 rows a
 * workgroup, which a short call leaves mostly idle). Kernel times, forced variants interleaved
 * (2026-11-30, B=1 E=512 H=8, KV cache of 1024; sg / 2-row / 4-row): 1 row 1.2 / 8.1 / 13.6 ms; 4 rows
 * 4.2 / 8.3 / 14.0; 5 rows 5.1 / 8.5 / 13.9; 8 rows 7.9 / 8.5 / 13.8; 16 rows 16.3 / 9.6 / 15.5 (and
 * 15.9 / 11.3 / 14.7); 32 rows 34.1 / 10.0 / 15.4; 64 rows 63.7 / 14.4 / 16.9; 80 rows 97.1 / 20.2 /
 * 19.2; prompts without a cache, S=32 and 64: 2-row 0.39 and 0.66 ms, 4-row 0.59 and 0.98; S=128 1.18
 * against 1.05. Where a call of up to 16 rows sees at most 16 keys (the whole call is a few microseconds
 * of work), the sg kernel's smaller dispatch wins: B=1 S=16 E=32 H=2, wall time of a forward 0.41–0.47
 * against 0.53–0.56 ms, while at 64 keys the 2-row kernel is already ahead (1.11 against 1.84 ms). These
 * bounds are where the tuner's classes end (tuner.ts shapeClass: q4, q16, q64; kv16, kv64), so each
 * class has one built-in choice.
 */
export const FEW_QUERY_ROWS = 8;
export const SHORT_QUERY_ROWS = 64;

/** What decides lavapipe's built-in attention kernel: the call's longest sequence of query rows, and of keys. */
export interface CallSize {
  queryRows: number;
  keys: number;
  /** Rows of the projections' GEMMs (B·Sq; with cross-attention, the key's too, the larger). */
  rows?: number;
  /** Whether the layer's projection weights are packed (quantized). */
  packed?: boolean;
}

/**
 * Rows up to which the projections of a layer with packed weights run the GEMV core (a decode step:
 * one token per sequence, B ≤ 8): it reads each weight word once for all rows, where the GEMM cores'
 * tiles of 16 to 128 rows would read (and dequantize) them for rows that do not exist.
 */
export const GEMV_MAX_ROWS = 8;

/**
 * The GEMV of decode steps with packed weights: a workgroup per 8 columns splitting K on GPUs, an
 * invocation per 4 columns on CPU adapters (no barrier), A passed between lanes on lavapipe where the
 * device has subgroups (gemv-rows-subgroup: 2.2–2.6× faster than gemv-rows there, q4_0 at E=2048).
 * SwiftShader is the exception: its 4×4 register GEMM on the packed weights beat every GEMV there
 * (Chromium, decode step at E=2048 H=16 G=4 over 1024, projections' GPU time: q4_0 55 ms against
 * gemv-rows' 87, gemv-rows-subgroup's 150 and gemv's 179; register-8x8 60; q8_0 51 against 88).
 */
function withGemv(kind: AdapterKind, choice: KernelChoice, call?: CallSize, subgroups = false): KernelChoice {
  if (!call?.packed || call.rows === undefined || call.rows > GEMV_MAX_ROWS) return choice;
  const gemv = decodeProjection(kind, subgroups);
  return { ...choice, qkv_projection: gemv, output_projection: gemv };
}

/** The projection kernel of a decode step (≤ GEMV_MAX_ROWS rows) with packed weights, by adapter kind (withGemv). */
function decodeProjection(kind: AdapterKind, subgroups = false): ProjectionVariant {
  return kind === 'gpu' ? 'gemv' : kind === 'jit-cpu' ? 'register-4x4' : kind === 'unrolling-cpu' && subgroups ? 'gemv-rows-subgroup' : 'gemv-rows';
}

function fewRowsKernel({ queryRows, keys }: CallSize): boolean {
  return queryRows <= FEW_QUERY_ROWS || (queryRows <= 16 && keys <= 16);
}

/**
 * The built-in final choice of an adapter kind (and whether the device has the `subgroups` feature):
 * what runs, once compiled, where nothing was swept, forced or remembered (the tuner's measurements on
 * these adapters; docs/PERFORMANCE.md). `call`: the call's longest sequences of query rows and keys,
 * where they decide the attention kernel (a decode step of one row wants another kernel than a prompt
 * of 512); without it, a prompt's. With packed weights, calls of at most GEMV_MAX_ROWS rows run the GEMV core.
 */
export function defaultChoice(kind: AdapterKind, subgroups = false, call?: CallSize): KernelChoice {
  return withGemv(kind, builtInChoice(kind, subgroups, call), call, subgroups);
}

function builtInChoice(kind: AdapterKind, subgroups: boolean, call?: CallSize): KernelChoice {
  const queryRows = call?.queryRows ?? Number.POSITIVE_INFINITY;
  switch (kind) {
    case 'unrolling-cpu':
      // With subgroups, the 16-row subgroup GEMM (FMAs on the accumulators): against the 8-row one, medians of
      // interleaved kernel times under load (2026-11-30), QKV and output 1.45× and 1.49× faster at B=1 S=512
      // E=512 H=8, 2.8× and 1.5× at S=128 E=256 H=4, 1.35× and 1.25× at a decode step (S=1 E=512), equal at
      // S=16 E=32; f16 1.37× and 1.25× at S=512. It compiles in ~4 s cold against ~1.7 s (tier 0 meanwhile).
      // Without subgroups, the 4×4 GEMM: the sweeps here chose it over 8×8 at both benchmark shapes, and it
      // compiles in a fraction of the time.
      // Attention with subgroups: K/V loaded once per subgroup and shuffled to the lanes, 4 rows per lane
      // (kernel times, interleaved, 2026-11-30, B=1 S=512 E=512 H=8): 25.2 ms, 2 rows per lane 31.3 ms in the
      // same run, where rows64-keys32-r4 took 63–88 ms in this session's runs. The 4-row kernel compiles for
      // ~16 s cold at Dh 64 against ~4 s (tier 0 runs meanwhile); with the 2-row one built in, the sweeps kept
      // it for causal calls (their timing trial then took the first 512 rows, which see few keys, where 4
      // rows gain < 10%; trials now take the middle rows: tuning/trial.ts) and the causal layer at S=2048
      // lost its goal of ≥ 1.35× the non-causal speed (1.19–1.26×, docs/PERFORMANCE.md). At few query rows, the kernel
      // whose lanes share a row, and for short calls the 2-row one, whose workgroups hold half as many rows
      // (FEW_QUERY_ROWS, SHORT_QUERY_ROWS).
      return subgroups
        ? {
            qkv_projection: 'subgroup-16x4',
            flash_attention: call && fewRowsKernel(call) ? 'rows16-keys32-sg' : queryRows <= SHORT_QUERY_ROWS ? 'rows64-keys4-r2-shuffle' : 'rows128-keys4-r4-shuffle',
            output_projection: 'subgroup-16x4',
          }
        : { qkv_projection: 'register-4x4', flash_attention: 'rows64-keys32-r4', output_projection: 'register-4x4' };
    case 'cpu':
      return { qkv_projection: 'register-8x8', flash_attention: 'rows64-keys32-r4', output_projection: 'register-8x8' };
    case 'jit-cpu':
      // The unrolled attention kernel: 3.1–5.7× faster than rows64-keys32 at B=1 S=512 E=512 H=8 in Chromium
      // (kernel time, 4 pairs of runs alternating, medians ~594 → 126 ms; 2026-11-30), 4.2× in Node (docs/PERFORMANCE.md).
      return { qkv_projection: 'register-8x8', flash_attention: 'rows32-keys4-r4-unrolled', output_projection: 'register-8x8' };
    case 'gpu':
      return { qkv_projection: 'workgroup-64', flash_attention: 'rows64-keys32', output_projection: 'workgroup-64' };
  }
}

/**
 * Tier 0: what a call runs while the final choice compiles. The variants that compile fastest on
 * every adapter kind (the 4×4 register GEMM; attention with its head-size loops left as loops), and
 * correct everywhere; slower than the final ones, so the engine leaves them once those are ready.
 */
export const TIER0: KernelChoice = { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-loop', output_projection: 'register-4x4' };

/**
 * The built-in choice where final kernels compile in line, in the call that needs them (nothing in the
 * background: wgpu, or tuning.background false), on a CPU adapter: tier 0's variants, whose compile a
 * first call can afford; engine.tune() sweeps for faster ones, remembered for later sessions. Measured in
 * Deno 2.9.6 (wgpu) on lavapipe with fresh shader caches (2026-12-02, 2-core EPYC, register-4x4
 * projections): at B=1 S=128 E=256 H=4 the first forward took 3.2 s with tier 0's attention, 12.4 s with
 * the built-in rows64-keys32-r4 (7.7 s rows64-keys32), and the forwards after it 45.7 against 39.4 ms
 * (39.5); at S=512 E=512 H=8 647 against 593 ms (547). Firefox's first forward with the built-in choice
 * took 14.0 s (its adapter names nothing, so its kind is 'gpu': `software`, from GPUAdapterInfo's
 * isFallbackAdapter, says it is a CPU). On GPUs, where a compile takes well under a second, the built-in choice.
 */
export function inLineChoice(kind: AdapterKind, subgroups = false, call?: CallSize, software = kind !== 'gpu'): KernelChoice {
  return software ? withGemv(kind === 'gpu' ? 'cpu' : kind, TIER0, call, subgroups) : defaultChoice(kind, subgroups, call); // a CPU's GEMV where the kind did not say CPU
}

/**
 * The variants a sweep compiles and times on an adapter kind: those whose record says they can win
 * there (measured; each record says why), in the registry's order; the subgroup variants among them
 * only where the device has the `subgroups` feature (never without it). The software variants are
 * candidates on CPU adapters only.
 */
export function candidates<K extends KernelName>(kind: AdapterKind, kernel: K, subgroups = false): readonly KernelChoice[K][] {
  const records: readonly VariantRecord[] = kernel === 'flash_attention' ? ATTENTION_RECORDS : PROJECTION_RECORDS;
  return records.filter((r) => offeredOn(r, kind, subgroups) && (subgroups || !r.features.subgroups)).map((r) => r.name) as unknown as readonly KernelChoice[K][];
}
