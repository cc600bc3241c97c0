// How the subgroup GEMM cores lay a workgroup out (variants.ts gemmLayout): row blocks of colLanes
// invocations, a power-of-two multiple of the largest subgroup size dividing the workgroup (a subgroup
// never straddles two blocks: A passes between its lanes), the dispatch covering every row and column,
// and as little work past N and M as the choices allow. The kernels themselves run with these layouts
// in test/kernel-variants.test.ts (on lavapipe's 8 lanes, e.g. N = 256 in 2 blocks of 64, and on 4).

import fc from 'fast-check';
import { expect, test } from 'vitest';
import { gemmLayout, gemmShape, PROJECTION_VARIANTS } from '../src/webgpu/variants.ts';

const subgroupCores = PROJECTION_VARIANTS.filter((v) => v.startsWith('subgroup-'));

test('every layout covers the GEMM with whole subgroups in each row block', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...subgroupCores),
      fc.integer({ min: 1, max: 5000 }),
      fc.integer({ min: 1, max: 1024 }).map((n4) => n4 * 4),
      fc.constantFrom(4, 8, 16, 32, 64, 128),
      (variant, M, N, largest) => {
        const gemm = gemmShape(variant);
        const WG = gemm.tileCols / 4;
        const { colLanes, groups } = gemmLayout(gemm, M, N, largest);
        expect(WG % colLanes).toBe(0);
        expect(colLanes % largest).toBe(0);
        expect(groups[0] * colLanes * 4).toBeGreaterThanOrEqual(N);
        expect(groups[1] * (WG / colLanes) * gemm.tileRows).toBeGreaterThanOrEqual(M);
      },
    ),
  );
});

test('narrow layers fill the workgroup with rows; wide ones, a decode step and unknown subgroup sizes keep one block', () => {
  const gemm = gemmShape('subgroup-16x4');
  // B=1 S=128 E=256 on lavapipe (8 lanes): the output projection (N = 256) in 2 blocks of 64 lanes, not
  // 128 lanes of which half compute columns past N; the QKV projection (N = 768) in 3 × 64 lanes, not 2 × 128.
  expect(gemmLayout(gemm, 128, 256, 8)).toEqual({ colLanes: 64, groups: [1, 4] });
  expect(gemmLayout(gemm, 128, 768, 8)).toEqual({ colLanes: 64, groups: [3, 4] });
  expect(gemmLayout(gemm, 512, 1536, 8)).toEqual({ colLanes: 128, groups: [3, 32] });
  expect(gemmLayout(gemm, 1, 256, 8)).toEqual({ colLanes: 128, groups: [1, 1] }); // one row: no second block
  expect(gemmLayout(gemm, 128, 256, 128)).toEqual({ colLanes: 128, groups: [1, 8] }); // subgroups may have 128 lanes
  // The register cores have no row blocks.
  expect(gemmLayout(gemmShape('register-4x4'), 100, 256, 8)).toEqual({ colLanes: 0, groups: [8, 4] });
});
