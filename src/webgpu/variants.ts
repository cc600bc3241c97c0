// The kernel variants the engine chooses between, per kernel: what each is, which ones can win on an
// adapter kind (only those are ever compiled for a sweep there), the built-in final choice per kind,
// and tier 0, the variants a call runs while the final ones compile (tuning/scheduler.ts).
//
//   projection (qkv_projection, output_projection): which GEMM core is appended to the problem file
//     register-4x4   shaders/gemm_register_4x4.wgsl, 4 rows × 4 columns per invocation
//     register-8x8   shaders/gemm_register_8x8.wgsl, 8 rows × 8 columns per invocation (fewer loads per FMA)
//     workgroup-64   shaders/gemm_workgroup.wgsl, 64 × 64 tiles staged through workgroup memory
//     workgroup-128  shaders/gemm_workgroup_128.wgsl, 128 × 128 tiles, 8 × 8 per invocation (GPUs only)
//     subgroup-4x4   shaders/gemm_subgroup.wgsl, 4 rows × 4 columns per invocation, the rows of A passed between
//                    lanes by subgroupShuffle (needs the `subgroups` feature)
//     subgroup-8x4   the same with 8 rows (each B load serves 8 rows; more registers)
//     subgroup-16x4  shaders/gemm_subgroup_fma.wgsl: 16 rows × 4 columns, A shuffled the same way, the products as
//                    fused multiply-adds on the accumulators (written for lavapipe)
//   attention (flash_attention): query rows per workgroup × keys per K/V tile (× rows per invocation)
//     rows32-keys32, rows64-keys32: one row per invocation (keys per tile drop to what workgroup memory holds)
//     rows32-keys32-loop: the same with its loops over the head size left as loops (not unrolled by the
//       driver's compiler): slower, but its compile time hardly grows with the head size
//     rows32-keys32-r2, rows32-keys32-r4, rows64-keys32-r4: 2 or 4 rows per invocation, so each K/V
//       element read serves several rows (fewer loads per multiply-add; more registers)
//     rows16-keys32-sg: the lanes of a subgroup share a row, each taking some of its keys; the row's max
//       and sum are subgroup reductions (needs the `subgroups` feature; keys32 sizes split-KV's chunks)
//     rows32-keys4-r4-unrolled: 4 rows per invocation, K and V read straight from storage 4 keys a step (no
//       workgroup tiles, no barriers), its loops over the head size and the rows written out by the host
//       (shaders/flash_attention_unrolled.wgsl): for JITs that neither unroll nor skip untaken branches
//       (SwiftShader)
//     rows64-keys4-r2-shuffle, rows128-keys4-r4-shuffle: 2 or 4 rows per invocation; each block of K/V rows is
//       loaded once per subgroup (lane t loads key t) and passed to every lane by subgroupShuffle
//       (shaders/flash_attention_shuffle.wgsl): for CPU drivers where a load costs ~24 multiply-adds and a
//       shuffle almost nothing (lavapipe); needs the `subgroups` feature; the workgroup grows to a multiple
//       of the adapter's largest subgroup size. 4 rows run ~20% faster, 2 compile ~4× faster (README)
//
// Subgroup variants are offered (candidates) and may be forced only where the device has the
// `subgroups` feature (webgpu/device.ts requests it where the adapter has it); they are correct at any
// subgroup size, and the tests also run them as if the subgroup were smaller (subgroupEmulation).
//
// Compile cost is a cost: drivers compile WGSL through LLVM (lavapipe, SwiftShader), FXC/DXC or the
// GPU vendor's compiler, and written-out tiles and unrolled loops run fast but compile slowly (the
// README's performance section has the figures). So a first call runs tier 0, which compiles fast.

import gemmRegister4x4 from '../../shaders/gemm_register_4x4.wgsl?raw';
import gemmRegister8x8 from '../../shaders/gemm_register_8x8.wgsl?raw';
import gemmSubgroup from '../../shaders/gemm_subgroup.wgsl?raw';
import gemmSubgroupFma from '../../shaders/gemm_subgroup_fma.wgsl?raw';
import gemmWorkgroup from '../../shaders/gemm_workgroup.wgsl?raw';
import gemmWorkgroup128 from '../../shaders/gemm_workgroup_128.wgsl?raw';

import type { AttentionVariant, ProjectionVariant } from '../types.ts';

export type { AttentionVariant, ProjectionVariant };
export const PROJECTION_VARIANTS: readonly ProjectionVariant[] = [
  'register-4x4',
  'register-8x8',
  'workgroup-64',
  'workgroup-128',
  'subgroup-4x4',
  'subgroup-8x4',
  'subgroup-16x4',
];
export const ATTENTION_VARIANTS: readonly AttentionVariant[] = [
  'rows32-keys32',
  'rows64-keys32',
  'rows32-keys32-loop',
  'rows32-keys32-r2',
  'rows32-keys32-r4',
  'rows64-keys32-r4',
  'rows16-keys32-sg',
  'rows32-keys4-r4-unrolled',
  'rows64-keys4-r2-shuffle',
  'rows128-keys4-r4-shuffle',
];

/** Whether a variant uses subgroup operations (so needs a device with the `subgroups` feature). */
export function needsSubgroups(variant: string): boolean {
  return variant.startsWith('subgroup-') || variant.endsWith('-sg') || variant.endsWith('-shuffle');
}

/**
 * Tests only: subgroup kernels use at most this many lanes of each subgroup (0: all of them), the
 * others contributing nothing, so the size-dependent arithmetic runs as on an adapter with smaller
 * subgroups (an override constant, SUBGROUP_LANES: part of each pipeline's cache key).
 */
export const subgroupEmulation = { lanes: 0 };

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

export function adapterKind(info: { vendor: string; architecture: string; device: string; description: string }): AdapterKind {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.toLowerCase();
  if (/llvmpipe|lavapipe/.test(text)) return 'unrolling-cpu';
  if (/swiftshader/.test(text)) return 'jit-cpu';
  if (/microsoft basic render|warp|\bcpu\b|software/.test(text)) return 'cpu';
  return 'gpu';
}

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
}

function fewRowsKernel({ queryRows, keys }: CallSize): boolean {
  return queryRows <= FEW_QUERY_ROWS || (queryRows <= 16 && keys <= 16);
}

/**
 * The built-in final choice of an adapter kind (and whether the device has the `subgroups` feature):
 * what runs, once compiled, where nothing was swept, forced or remembered (the tuner's measurements on
 * these adapters; README, Performance). `call`: the call's longest sequences of query rows and keys,
 * where they decide the attention kernel (a decode step of one row wants another kernel than a prompt
 * of 512); without it, a prompt's.
 */
export function defaultChoice(kind: AdapterKind, subgroups = false, call?: CallSize): KernelChoice {
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
      // lost its goal of ≥ 1.35× the non-causal speed (1.19–1.26×, README). At few query rows, the kernel
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
      // (kernel time, 4 pairs of runs alternating, medians ~594 → 126 ms; 2026-11-30), 4.2× in Node (README).
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
 * The variants a sweep compiles and times on an adapter kind: those that can win there (measured); the
 * subgroup variants among them only where the device has the `subgroups` feature (never without it).
 */
export function candidates<K extends KernelName>(kind: AdapterKind, kernel: K, subgroups = false): readonly KernelChoice[K][] {
  const sets: Record<AdapterKind, { projection: readonly ProjectionVariant[]; attention: readonly AttentionVariant[] }> = {
    // Workgroup tiles lose on CPUs (barriers); one row per invocation loses where the compiler keeps
    // several rows in registers, and wins over the tiled rows body where it does not (SwiftShader), as
    // the unrolled kernel wins there over both; on lavapipe that one is as fast as the rows body but
    // slow to compile (README), so lavapipe does not try it. The subgroup attention kernel reads each
    // K/V element for one row only: 5× slower than the built-in choice on lavapipe and 27–40× on
    // SwiftShader (2026-11-30: bench --roofline; forced and interleaved on SwiftShader in Node), so
    // only GPUs try it for prompts (on lavapipe it is the built-in choice of a few-row call, which a
    // sweep of such a class then includes); SwiftShader's JIT also runs the subgroup GEMM slower than
    // its register tiles, and the shuffle attention kernels 1.3× (S=128) to 8× (a decode step) slower
    // than its unrolled one (Node, its ICD, 2026-11-30).
    'unrolling-cpu': {
      projection: ['register-4x4', 'register-8x8', 'subgroup-4x4', 'subgroup-8x4', 'subgroup-16x4'],
      // With subgroups the shuffle kernels replace the tiled ones (2–3× faster: README), so a sweep compiles only them.
      attention: subgroups ? ['rows64-keys4-r2-shuffle', 'rows128-keys4-r4-shuffle'] : ['rows32-keys32-r2', 'rows64-keys32-r4'],
    },
    'jit-cpu': {
      projection: ['register-4x4', 'register-8x8'],
      attention: ['rows32-keys32', 'rows64-keys32', 'rows32-keys32-loop', 'rows32-keys4-r4-unrolled'],
    },
    cpu: {
      projection: ['register-4x4', 'register-8x8', 'subgroup-4x4', 'subgroup-8x4', 'subgroup-16x4'],
      attention: ATTENTION_VARIANTS.filter((v) => !needsSubgroups(v)),
    },
    gpu: { projection: PROJECTION_VARIANTS, attention: ATTENTION_VARIANTS },
  };
  const set = sets[kind];
  const list: readonly string[] = kernel === 'flash_attention' ? set.attention : set.projection;
  return list.filter((v) => subgroups || !needsSubgroups(v)) as unknown as readonly KernelChoice[K][];
}

/** How a projection variant is built and dispatched. */
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

/** The largest subgroup size of the device's adapter (128, the most WebGPU allows, where it does not say). */
export function largestSubgroup(device: GPUDevice): number {
  return (device.adapterInfo as (GPUAdapterInfo & { subgroupMaxSize?: number }) | undefined)?.subgroupMaxSize ?? 128;
}

/**
 * How a GEMM of M rows and N columns is laid out for `variant`: its workgroups along N and M, and, for
 * the subgroup cores (tileCols = 4·WG), `colLanes`, the invocations of one row block (each 4 columns
 * of the block's rows). A layer narrower than the workgroup's 4·WG columns would leave lanes computing
 * columns past N (half of them at N = 256); instead the workgroup holds WG / colLanes row blocks. The
 * choice: the power-of-two multiple of the largest subgroup size (so that no subgroup straddles two
 * blocks: A passes between its lanes) dividing WG whose lanes do the most useful work, columns past N
 * and rows past M both counting as waste (a decode step's single row keeps one block of all lanes).
 */
export function gemmLayout(gemm: GemmShape, M: number, N: number, largest: number): { colLanes: number; groups: [number, number] } {
  if (!gemm.subgroups) return { colLanes: 0, groups: [Math.ceil(N / gemm.tileCols), Math.ceil(M / gemm.tileRows)] };
  const WG = gemm.tileCols / 4;
  const rows = gemm.tileRows;
  const N4 = N / 4;
  let best = { colLanes: WG, groups: [0, 0] as [number, number], useful: 0 };
  for (let colLanes = WG; colLanes >= Math.min(largest, WG); colLanes /= 2) {
    const blocks = WG / colLanes;
    const groups: [number, number] = [Math.ceil(N4 / colLanes), Math.ceil(M / (rows * blocks))];
    const useful = (N4 * M) / (groups[0] * colLanes * groups[1] * blocks * rows);
    if (useful > best.useful * 1.0001) best = { colLanes, groups, useful };
  }
  return { colLanes: best.colLanes, groups: best.groups };
}

export function gemmShape(variant: ProjectionVariant): GemmShape {
  switch (variant) {
    case 'register-4x4':
      return { core: gemmRegister4x4, constants: { WG_X: 8, WG_Y: 8 }, tileRows: 32, tileCols: 32, subgroups: false };
    case 'register-8x8':
      return { core: gemmRegister8x8, constants: { WG_X: 8, WG_Y: 8 }, tileRows: 64, tileCols: 64, subgroups: false };
    case 'workgroup-64':
      return { core: gemmWorkgroup, constants: {}, tileRows: 64, tileCols: 64, subgroups: false };
    case 'workgroup-128':
      return { core: gemmWorkgroup128, constants: {}, tileRows: 128, tileCols: 128, subgroups: false };
    case 'subgroup-4x4':
    case 'subgroup-8x4': {
      // 128 invocations: a multiple of every subgroup size (4…128), so subgroups are whole.
      const ROWS = variant === 'subgroup-4x4' ? 4 : 8;
      const constants = { WG: 128, SUBGROUP_LANES: subgroupEmulation.lanes };
      return { core: gemmSubgroup, constants, sizes: { ROWS }, tileRows: ROWS, tileCols: 512, subgroups: true };
    }
    case 'subgroup-16x4': {
      const constants = { WG: 128, SUBGROUP_LANES: subgroupEmulation.lanes };
      return { core: gemmSubgroupFma, constants, sizes: { ROWS: 16 }, tileRows: 16, tileCols: 512, subgroups: true };
    }
  }
}

/**
 * Query rows per workgroup, keys per tile and rows per invocation asked for, of an attention variant
 * ("rows64-keys32-r4": 64 rows, 32 keys, 4 rows per invocation; no "-r": 1), whether its loops
 * over the head size stay loops ("-loop") or are written out with K and V read from storage ("-unrolled").
 */
export function attentionShape(variant: AttentionVariant): {
  rows: number;
  keys: number;
  rowsPerInvocation: number;
  loop: boolean;
  subgroup: boolean;
  unrolled: boolean;
  shuffle: boolean;
} {
  const [, rows, keys, rpi, loop, sg, unrolled, shuffle] = /^rows(\d+)-keys(\d+)(?:-r(\d+))?(-loop)?(-sg)?(-unrolled)?(-shuffle)?$/.exec(variant) as RegExpExecArray;
  return {
    rows: Number(rows),
    keys: Number(keys),
    rowsPerInvocation: Number(rpi ?? 1),
    loop: loop !== undefined,
    subgroup: sg !== undefined,
    unrolled: unrolled !== undefined,
    shuffle: shuffle !== undefined,
  };
}
