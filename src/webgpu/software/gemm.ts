// The GEMM core written for lavapipe (a CPU rasterizer with subgroups): subgroup-16x4, 16 rows × 4
// columns per invocation, the rows of A passed between lanes by subgroupShuffle as in the subgroup
// cores (kernels/gemm.ts), the products as fused multiply-adds on the accumulators. It wins on
// lavapipe (1.25–2.8× over subgroup-8x4: variants.ts defaultChoice); a GPU sweep never compiles it.

import gemmSubgroupFma from '../../../shaders/software/gemm_subgroup_fma.wgsl?raw';
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
