// The GEMM cores written for CPU rasterizers, one record each (variant-record.ts), gathered with the GPU
// kernel set's (variants/gemm.ts) by variants.ts; a GPU sweep never compiles them.
//   subgroup-16x4  lavapipe (a CPU rasterizer with subgroups): 16 rows × 4 columns per invocation, the
//                  rows of A passed between lanes by subgroupShuffle in the subgroup cores' kernel
//                  (shaders/gemm_subgroup_block.wgsl), the products as fused multiply-adds on the
//                  accumulators. It wins on lavapipe (1.25–2.8× over subgroup-8x4: variants.ts defaultChoice).
//   gemv-rows      decode steps (M ≤ 4 per block): each invocation walks all of K for 4 columns, no
//                  workgroup memory and no barrier (gemv.wgsl's reduction makes a coroutine on a CPU);
//                  the built-in choice of CPU adapters without subgroups for packed weights at M ≤ GEMV_MAX_ROWS.
//   gemv-rows-subgroup  the same steps, A loaded by the lanes between them (a vec4 each) and passed by
//                  subgroupShuffle: on lavapipe a storage load costs per lane and component even when
//                  uniform, and gemv-rows' A loads were most of its work with packed weights. The built-in
//                  choice there (q4_0 at E=2048: projections 9.1 → 4.7 ms GPU time).

import gemmCommon from '../../../shaders/gemm_common.wgsl?raw';
import gemmSubgroupBlock from '../../../shaders/gemm_subgroup_block.wgsl?raw';
import gemmSubgroupFma from '../../../shaders/software/gemm_subgroup_fma.wgsl?raw';
import gemvRows from '../../../shaders/software/gemv_rows.wgsl?raw';
import gemvRowsSubgroup from '../../../shaders/software/gemv_rows_subgroup.wgsl?raw';
import { joinSources, type ProjectionRecord, subgroupEmulation } from '../variant-record.ts';

/** The software projection variants, in the registry's order (variants.ts PROJECTION_RECORDS). */
export const SOFTWARE_PROJECTION_RECORDS = [
  {
    name: 'subgroup-16x4',
    core: joinSources(gemmCommon, gemmSubgroupBlock, gemmSubgroupFma),
    // 128 invocations: a multiple of every subgroup size (4…128), so subgroups are whole.
    constants: () => ({ WG: 128, SUBGROUP_LANES: subgroupEmulation.lanes }),
    sizes: { ROWS: 16 },
    tileRows: 16,
    tileCols: 512,
    features: { subgroups: true },
    candidateOn: ['unrolling-cpu', 'cpu'],
    software: true,
  },
  {
    name: 'gemv-rows',
    core: gemvRows,
    constants: () => ({}),
    tileRows: 4,
    tileCols: 256,
    features: { subgroups: false },
    // The built-in choice of decode steps with packed weights on CPU adapters (variants.ts); never swept.
    candidateOn: [],
    software: true,
  },
  {
    name: 'gemv-rows-subgroup',
    core: gemvRowsSubgroup,
    constants: () => ({ SUBGROUP_LANES: subgroupEmulation.lanes }),
    tileRows: 4,
    tileCols: 256,
    features: { subgroups: true },
    // The built-in choice of decode steps with packed weights on lavapipe (variants.ts); never swept.
    candidateOn: [],
    software: true,
  },
] as const satisfies readonly ProjectionRecord[];
