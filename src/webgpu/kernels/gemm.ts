// The GEMM cores of the projections (qkv_projection, output_projection), one record each: the core
// appended to the problem file, its tiles and constants, what it needs and where a sweep tries it
// (variant-record.ts); and how a GEMM of M × N is laid out for a core (gemmLayout).
//
//   register-4x4   shaders/gemm_register_4x4.wgsl, 4 rows × 4 columns per invocation
//   register-8x8   shaders/gemm_register_8x8.wgsl, 8 rows × 8 columns per invocation (fewer loads per FMA)
//   workgroup-64   shaders/gemm_workgroup.wgsl, 64 × 64 tiles staged through workgroup memory
//   workgroup-128  shaders/gemm_workgroup_128.wgsl, 128 × 128 tiles, 8 × 8 per invocation (GPUs only)
//   subgroup-4x4   shaders/gemm_subgroup.wgsl, 4 rows × 4 columns per invocation, the rows of A passed between
//                  lanes by subgroupShuffle (needs the `subgroups` feature)
//   subgroup-8x4   the same with 8 rows (each B load serves 8 rows; more registers)
//   subgroup-16x4  software/gemm.ts: 16 rows, the products as FMAs on the accumulators (lavapipe)
//   gemv           shaders/gemv.wgsl, decode steps (M ≤ 8): a workgroup per 8 columns, its invocations
//                  splitting K, each weight read once for all rows (variants.ts chooses it for packed
//                  weights at M ≤ GEMV_MAX_ROWS; never swept otherwise: its candidateOn is empty)
//   gemv-rows      software/gemm.ts: decode steps on CPU adapters, an invocation per 4 columns, no barrier
//   gemv-rows-subgroup  software/gemm.ts: the same with A passed between lanes (lavapipe with subgroups)
//
// Where they are tried: register tiles everywhere (they compile fastest, and win on CPUs whose
// compiler keeps them in registers); workgroup tiles on GPUs only (barriers cost on CPUs); the
// subgroup cores where the device has subgroups, but not on SwiftShader, whose JIT runs them slower
// than its register tiles (Node, its ICD, 2026-11-30).

import gemmRegister4x4 from '../../../shaders/gemm_register_4x4.wgsl?raw';
import gemmRegister8x8 from '../../../shaders/gemm_register_8x8.wgsl?raw';
import gemmSubgroup from '../../../shaders/gemm_subgroup.wgsl?raw';
import gemmWorkgroup from '../../../shaders/gemm_workgroup.wgsl?raw';
import gemmWorkgroup128 from '../../../shaders/gemm_workgroup_128.wgsl?raw';
import gemv from '../../../shaders/gemv.wgsl?raw';
import type { ProjectionVariant } from '../../types.ts';
import { GEMV_ROWS, GEMV_ROWS_SUBGROUP, SUBGROUP_16X4 } from '../software/gemm.ts';
import { type GemmShape, type ProjectionRecord, subgroupEmulation } from '../variant-record.ts';

const EVERYWHERE = ['unrolling-cpu', 'jit-cpu', 'cpu', 'gpu'] as const;

function subgroupCore(name: ProjectionVariant, ROWS: number): ProjectionRecord {
  return {
    name,
    files: ['shaders/gemm_subgroup.wgsl'],
    core: gemmSubgroup,
    // 128 invocations: a multiple of every subgroup size (4…128), so subgroups are whole.
    constants: () => ({ WG: 128, SUBGROUP_LANES: subgroupEmulation.lanes }),
    sizes: { ROWS },
    tileRows: ROWS,
    tileCols: 512,
    features: { subgroups: true },
    candidateOn: ['unrolling-cpu', 'cpu', 'gpu'],
    software: false,
  };
}

/** The projection variants, in the registry's order (variants.ts PROJECTION_VARIANTS). */
export const PROJECTION_RECORDS: readonly ProjectionRecord[] = [
  {
    name: 'register-4x4',
    files: ['shaders/gemm_register_4x4.wgsl'],
    core: gemmRegister4x4,
    constants: () => ({ WG_X: 8, WG_Y: 8 }),
    tileRows: 32,
    tileCols: 32,
    features: { subgroups: false },
    candidateOn: EVERYWHERE,
    software: false,
  },
  {
    name: 'register-8x8',
    files: ['shaders/gemm_register_8x8.wgsl'],
    core: gemmRegister8x8,
    constants: () => ({ WG_X: 8, WG_Y: 8 }),
    tileRows: 64,
    tileCols: 64,
    features: { subgroups: false },
    candidateOn: EVERYWHERE,
    software: false,
  },
  {
    name: 'workgroup-64',
    files: ['shaders/gemm_workgroup.wgsl'],
    core: gemmWorkgroup,
    constants: () => ({}),
    tileRows: 64,
    tileCols: 64,
    features: { subgroups: false },
    candidateOn: ['gpu'],
    software: false,
  },
  {
    name: 'workgroup-128',
    files: ['shaders/gemm_workgroup_128.wgsl'],
    core: gemmWorkgroup128,
    constants: () => ({}),
    tileRows: 128,
    tileCols: 128,
    features: { subgroups: false },
    candidateOn: ['gpu'],
    software: false,
  },
  subgroupCore('subgroup-4x4', 4),
  subgroupCore('subgroup-8x4', 8),
  SUBGROUP_16X4,
  {
    name: 'gemv',
    files: ['shaders/gemv.wgsl'],
    core: gemv,
    constants: () => ({}),
    tileRows: 8,
    tileCols: 8,
    features: { subgroups: false },
    // The built-in choice of decode steps with packed weights (variants.ts), swept only there; for float
    // weights it may be forced (tuning.kernels), until measurements say where it wins.
    candidateOn: [],
    software: false,
  },
  GEMV_ROWS,
  GEMV_ROWS_SUBGROUP,
];

const BY_NAME = new Map(PROJECTION_RECORDS.map((r) => [r.name, r]));

/** The record of a projection variant. */
export function projectionRecord(variant: ProjectionVariant): ProjectionRecord {
  const record = BY_NAME.get(variant);
  if (!record) throw new Error(`no projection variant ${variant}`);
  return record;
}

/** How `variant` is built and dispatched. */
export function gemmShape(variant: ProjectionVariant): GemmShape {
  const r = projectionRecord(variant);
  return { core: r.core, constants: r.constants(), tileRows: r.tileRows, tileCols: r.tileCols, subgroups: r.features.subgroups, ...(r.sizes ? { sizes: r.sizes } : {}) };
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
