// The attention bodies written for CPU rasterizers, one record each (variant-record.ts), gathered with the
// GPU kernel set's (variants/flash-attention.ts) by variants.ts: appended to flash_attention.wgsl like
// every body (kernels/flash-attention.ts builds them through `build`), their loops written
// out by the host (unroll.ts). They win only where a CPU runs the shaders, and are tried only there:
//
//   rows32-keys4-r4-unrolled   shaders/software/flash_attention_unrolled.wgsl: 4 rows per invocation, K
//     and V read straight from storage 4 keys a step (no workgroup tiles, no barriers), its loops over
//     the head size and the rows written out: for JITs that neither unroll nor skip untaken branches
//     (SwiftShader, where it is 3.1–5.7× faster than rows64-keys32: variants.ts defaultChoice).
//   rows64-keys4-r2-shuffle, rows128-keys4-r4-shuffle   shaders/software/flash_attention_shuffle.wgsl: 2
//     or 4 rows per invocation; each block of K/V rows is loaded once per subgroup (lane t loads key t)
//     and passed to every lane by subgroupShuffle: for CPU drivers where a load costs ~24 multiply-adds
//     and a shuffle almost nothing (lavapipe); needs the `subgroups` feature; the workgroup grows to a
//     multiple of the adapter's largest subgroup size. 4 rows run ~20% faster, 2 compile ~4× faster.
//
// Where they are tried: the unrolled body on SwiftShader and other CPUs (on lavapipe it is as fast as
// the rows body but slow to compile, so lavapipe does not try it); the shuffle bodies on lavapipe with
// subgroups, where they replace the tiled bodies (2–3× faster), and nowhere else: SwiftShader's JIT runs
// them 1.3× (S=128) to 8× (a decode step) slower than its unrolled body (Node, its ICD, 2026-11-30).

import shuffleBody from '../../../shaders/software/flash_attention_shuffle.wgsl?raw';
import unrolledBody from '../../../shaders/software/flash_attention_unrolled.wgsl?raw';
import { type AttentionBuild, type AttentionRecord, type CandidateOn, subgroupEmulation } from '../variant-record.ts';
import { unrollLoops } from './unroll.ts';

/**
 * A body with its loops over the rows (and `counts`' other names) written out and, up to Dh = 64, over
 * the head size. Past Dh = 64 the loops over the head size run to params.Dh4, which no compiler
 * unrolls: written out, Dh = 128 took lavapipe's LLVM over 2 minutes to compile.
 */
function writtenOut(body: string, headDim: number, counts: Record<string, number>): string {
  return headDim <= 64 ? unrollLoops(body, { DH4: headDim / 4, ...counts }) : unrollLoops(body.replaceAll('d < DH4; d++', 'd < params.Dh4; d++'), counts);
}

function sizes(b: AttentionBuild): Record<string, number> {
  return { DH4: b.headDim / 4, BC: b.BC, RPI: b.RPI, HAS_SCORE_MOD: b.hasScoreMod };
}

function softwareBody<Name extends string>(
  name: Name,
  shape: { rows: number; keys: number; rowsPerInvocation: number; unrolled: boolean; shuffle: boolean },
  candidateOn: readonly CandidateOn[],
  build: AttentionRecord['build'],
): AttentionRecord<Name> {
  return {
    name,
    ...shape,
    loop: false,
    subgroup: false,
    features: { subgroups: shape.shuffle },
    candidateOn,
    software: true,
    build,
  };
}

// K and V from storage, 4 keys a step.
const unrolled = (b: AttentionBuild) => ({ code: b.code(writtenOut(unrolledBody, b.headDim, { RPI: b.RPI }), sizes(b), false), constants: { WG: b.BR / b.RPI } });

// Each block of K/V rows loaded once per subgroup and shuffled to every lane.
const shuffled = (b: AttentionBuild) => ({
  code: b.code(writtenOut(shuffleBody, b.headDim, { RPI: b.RPI, KC: 4 }), sizes(b), true),
  constants: { WG: b.BR / b.RPI, SUBGROUP_LANES: subgroupEmulation.lanes },
});

/** The software attention bodies, in the registry's order. */
export const SOFTWARE_ATTENTION_RECORDS = [
  softwareBody('rows32-keys4-r4-unrolled', { rows: 32, keys: 4, rowsPerInvocation: 4, unrolled: true, shuffle: false }, ['jit-cpu', 'cpu'], unrolled),
  softwareBody('rows64-keys4-r2-shuffle', { rows: 64, keys: 4, rowsPerInvocation: 2, unrolled: false, shuffle: true }, ['unrolling-cpu'], shuffled),
  softwareBody('rows128-keys4-r4-shuffle', { rows: 128, keys: 4, rowsPerInvocation: 4, unrolled: false, shuffle: true }, ['unrolling-cpu'], shuffled),
] as const satisfies readonly AttentionRecord[];
