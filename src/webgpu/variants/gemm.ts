// The GEMM cores of the GPU kernel set, one record each (variant-record.ts): the core appended to the
// problem file of qkv_projection or output_projection (kernels/qkv-projection.ts, output-projection.ts),
// its tiles and constants, what it needs and where a sweep tries it. Those written for CPU rasterizers
// are in software/gemm.ts; variants.ts gathers both into the registry.
//
//   register-4x4   shaders/gemm_register_4x4.wgsl, 4 rows × 4 columns per invocation
//   register-8x8   shaders/gemm_register_8x8.wgsl, 8 rows × 8 columns per invocation (fewer loads per FMA)
//   workgroup-64   shaders/gemm_workgroup.wgsl, 64 × 64 tiles staged through workgroup memory
//   workgroup-128  shaders/gemm_workgroup_128.wgsl, 128 × 128 tiles, 8 × 8 per invocation (GPUs only)
//   subgroup-4x4   shaders/gemm_subgroup.wgsl (in gemm_subgroup_block.wgsl's kernel), 4 rows × 4 columns per
//                  invocation, the rows of A passed between lanes by subgroupShuffle (needs the `subgroups` feature)
//   subgroup-8x4   the same with 8 rows (each B load serves 8 rows; more registers)
//   (the register and subgroup cores share shaders/gemm_common.wgsl's helpers)
//   gemv           shaders/gemv.wgsl, decode steps (M ≤ 8): a workgroup per 8 columns, its invocations
//                  splitting K, each weight read once for all rows (variants.ts chooses it for packed
//                  weights at M ≤ GEMV_MAX_ROWS; never swept otherwise: its candidateOn is empty)
//
// Where they are tried: register tiles everywhere (they compile fastest, and win on CPUs whose
// compiler keeps them in registers); workgroup tiles on GPUs only (barriers cost on CPUs); the
// subgroup cores where the device has subgroups, but not on SwiftShader, whose JIT runs them slower
// than its register tiles (Node, its ICD, 2026-11-30).

import gemmCommon from '../../../shaders/gemm_common.wgsl?raw';
import gemmRegister4x4 from '../../../shaders/gemm_register_4x4.wgsl?raw';
import gemmRegister8x8 from '../../../shaders/gemm_register_8x8.wgsl?raw';
import gemmSubgroup from '../../../shaders/gemm_subgroup.wgsl?raw';
import gemmSubgroupBlock from '../../../shaders/gemm_subgroup_block.wgsl?raw';
import gemmWorkgroup from '../../../shaders/gemm_workgroup.wgsl?raw';
import gemmWorkgroup128 from '../../../shaders/gemm_workgroup_128.wgsl?raw';
import gemv from '../../../shaders/gemv.wgsl?raw';
import { joinSources, type ProjectionRecord, subgroupEmulation } from '../variant-record.ts';

const EVERYWHERE = ['unrolling-cpu', 'jit-cpu', 'cpu', 'gpu'] as const;

function subgroupCore<Name extends string>(name: Name, ROWS: number): ProjectionRecord<Name> {
  return {
    name,
    core: joinSources(gemmCommon, gemmSubgroupBlock, gemmSubgroup),
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

/** The GPU kernel set's projection variants, in the registry's order (variants.ts PROJECTION_RECORDS). */
export const GPU_PROJECTION_RECORDS = [
  {
    name: 'register-4x4',
    core: joinSources(gemmCommon, gemmRegister4x4),
    constants: () => ({ WG_X: 8, WG_Y: 8 }),
    tileRows: 32,
    tileCols: 32,
    features: { subgroups: false },
    candidateOn: EVERYWHERE,
    software: false,
  },
  {
    name: 'register-8x8',
    core: joinSources(gemmCommon, gemmRegister8x8),
    constants: () => ({ WG_X: 8, WG_Y: 8 }),
    tileRows: 64,
    tileCols: 64,
    features: { subgroups: false },
    candidateOn: EVERYWHERE,
    software: false,
  },
  {
    name: 'workgroup-64',
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
  {
    name: 'gemv',
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
] as const satisfies readonly ProjectionRecord[];
