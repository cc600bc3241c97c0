// The GEMM cores written for CPU rasterizers; a GPU sweep never compiles them.
//   subgroup-16x4  lavapipe (a CPU rasterizer with subgroups): 16 rows × 4 columns per invocation, the
//                  rows of A passed between lanes by subgroupShuffle as in the subgroup cores
//                  (kernels/gemm.ts), the products as fused multiply-adds on the accumulators. It wins on
//                  lavapipe (1.25–2.8× over subgroup-8x4: variants.ts defaultChoice).
//   gemv-rows      decode steps (M ≤ 4 per block): each invocation walks all of K for 4 columns, no
//                  workgroup memory and no barrier (gemv.wgsl's reduction makes a coroutine on a CPU);
//                  the built-in choice of CPU adapters without subgroups for packed weights at M ≤ GEMV_MAX_ROWS.
//   gemv-rows-subgroup  the same steps, A loaded by the lanes between them (a vec4 each) and passed by
//                  subgroupShuffle: on lavapipe a storage load costs per lane and component even when
//                  uniform, and gemv-rows' A loads were most of its work with packed weights. The built-in
//                  choice there (q4_0 at E=2048: projections 9.1 → 4.7 ms GPU time).

import gemmSubgroupFma from '../../../shaders/software/gemm_subgroup_fma.wgsl?raw';
import gemvRows from '../../../shaders/software/gemv_rows.wgsl?raw';
import gemvRowsSubgroup from '../../../shaders/software/gemv_rows_subgroup.wgsl?raw';
import { type ProjectionRecord, subgroupEmulation } from '../variant-record.ts';

export const SUBGROUP_16X4: ProjectionRecord = {
  name: 'subgroup-16x4',
  files: ['shaders/software/gemm_subgroup_fma.wgsl'],
  core: gemmSubgroupFma,
  // 128 invocations: a multiple of every subgroup size (4…128), so subgroups are whole.
  constants: () => ({ WG: 128, SUBGROUP_LANES: subgroupEmulation.lanes }),
  sizes: { ROWS: 16 },
  tileRows: 16,
  tileCols: 512,
  features: { subgroups: true },
  candidateOn: ['unrolling-cpu', 'cpu'],
  software: true,
};

export const GEMV_ROWS: ProjectionRecord = {
  name: 'gemv-rows',
  files: ['shaders/software/gemv_rows.wgsl'],
  core: gemvRows,
  constants: () => ({}),
  tileRows: 4,
  tileCols: 256,
  features: { subgroups: false },
  // The built-in choice of decode steps with packed weights on CPU adapters (variants.ts); never swept.
  candidateOn: [],
  software: true,
};

export const GEMV_ROWS_SUBGROUP: ProjectionRecord = {
  name: 'gemv-rows-subgroup',
  files: ['shaders/software/gemv_rows_subgroup.wgsl'],
  core: gemvRowsSubgroup,
  constants: () => ({ SUBGROUP_LANES: subgroupEmulation.lanes }),
  tileRows: 4,
  tileCols: 256,
  features: { subgroups: true },
  // The built-in choice of decode steps with packed weights on lavapipe (variants.ts); never swept.
  candidateOn: [],
  software: true,
};
