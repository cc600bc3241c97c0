// How a GEMM of M × N is laid out for a projection's GEMM core (gemmLayout). The cores themselves, one
// record each, are in the registry (variants.ts: gemmShape looks one up).

import type { GemmShape } from '../variant-record.ts';

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
