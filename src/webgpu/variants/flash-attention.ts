// The attention bodies of the GPU kernel set, one record each (variant-record.ts): appended to
// flash_attention.wgsl by kernels/flash-attention.ts, which builds them on a device through `build`.
// Those written for CPU rasterizers are in software/flash-attention.ts; variants.ts gathers both into
// the registry. A tiled body (row or rows) stages K and V through workgroup memory.
//
//   rows32-keys32, rows64-keys32   shaders/flash_attention_row.wgsl: one query row per invocation
//   rows32-keys32-loop             the same, its loops over the head size left as loops (tier 0)
//   rows32-keys32-r2, -r4, rows64-keys32-r4   shaders/flash_attention_rows.wgsl: 2 or 4 rows per invocation
//   rows16-keys32-sg               shaders/flash_attention_subgroup.wgsl: the lanes of a subgroup share a row

import oneRowBody from '../../../shaders/flash_attention_row.wgsl?raw';
import rowsBody from '../../../shaders/flash_attention_rows.wgsl?raw';
import subgroupBody from '../../../shaders/flash_attention_subgroup.wgsl?raw';
import { type AttentionBuild, type AttentionRecord, type CandidateOn, subgroupEmulation } from '../variant-record.ts';

/** A tiled body: one row per invocation (flash_attention_row.wgsl) where RPI is 1 on this head size, else RPI rows (flash_attention_rows.wgsl). */
function tiledBody(b: AttentionBuild, loop: boolean): { code: string; constants: Record<string, number> } {
  const { headDim, BR, BC, RPI, hasScoreMod } = b;
  // One row per invocation has its own body (scalars, no per-row arrays), which drivers that do not
  // unroll constant loops (SwiftShader's JIT) run faster than the RPI body at RPI = 1; the tuner measures which.
  return RPI === 1
    ? { code: b.code(oneRowBody, { DH4: headDim / 4, BC, LOOP: loop ? 1 : 0, HAS_SCORE_MOD: hasScoreMod }, false), constants: { BR } }
    : { code: b.code(rowsBody, { DH4: headDim / 4, BC, RPI, HAS_SCORE_MOD: hasScoreMod }, false), constants: { WG: BR / RPI } };
}

function tiled<Name extends string>(name: Name, rows: number, rowsPerInvocation: number, loop: boolean, candidateOn: readonly CandidateOn[]): AttentionRecord<Name> {
  return {
    name,
    rows,
    keys: 32,
    rowsPerInvocation,
    loop,
    subgroup: false,
    unrolled: false,
    shuffle: false,
    features: { subgroups: false },
    candidateOn,
    software: false,
    build: (b) => tiledBody(b, loop),
  };
}

// Where they are tried: one row per invocation loses where the compiler keeps several rows in registers
// (lavapipe) and wins over the rows body where it does not (SwiftShader); the rows bodies win on
// lavapipe without subgroups (with them, the shuffle bodies replace them there: 2–3× faster). The
// subgroup body reads each K/V element for one row only: 5× slower than the built-in choice on
// lavapipe and 27–40× on SwiftShader (2026-11-30), so only GPUs try it (on lavapipe it is the built-in
// choice of a few-row call, which a sweep of such a class then includes).
const TILED_ONE_ROW: readonly CandidateOn[] = ['jit-cpu', 'cpu', 'gpu'];

/** The GPU kernel set's attention variants, in the registry's order (variants.ts ATTENTION_RECORDS). */
export const GPU_ATTENTION_RECORDS = [
  tiled('rows32-keys32', 32, 1, false, TILED_ONE_ROW),
  tiled('rows64-keys32', 64, 1, false, TILED_ONE_ROW),
  // Its loops over the head size left as loops: slower, but its compile time hardly grows with the head size (tier 0).
  tiled('rows32-keys32-loop', 32, 1, true, TILED_ONE_ROW),
  tiled('rows32-keys32-r2', 32, 2, false, ['unrolling-cpu:no-subgroups', 'cpu', 'gpu']),
  tiled('rows32-keys32-r4', 32, 4, false, ['cpu', 'gpu']),
  tiled('rows64-keys32-r4', 64, 4, false, ['unrolling-cpu:no-subgroups', 'cpu', 'gpu']),
  {
    // The lanes of a subgroup share a row (flash_attention_subgroup.wgsl): BR rows, 64 invocations;
    // keys32 sizes split-KV's chunks.
    name: 'rows16-keys32-sg',
    rows: 16,
    keys: 32,
    rowsPerInvocation: 1,
    loop: false,
    subgroup: true,
    unrolled: false,
    shuffle: false,
    features: { subgroups: true },
    candidateOn: ['gpu'],
    software: false,
    build: (b: AttentionBuild) => ({
      code: b.code(subgroupBody, { DH4: b.headDim / 4, BC: b.BC, HAS_SCORE_MOD: b.hasScoreMod }, true),
      constants: { WG: 64, BR: b.BR, SUBGROUP_LANES: subgroupEmulation.lanes },
    }),
  },
] as const satisfies readonly AttentionRecord[];
