// The tuner's correctness gate: before a kernel variant is timed on an adapter, it runs a small layer
// (B = 2, S = 37: no tile divides it; two query heads sharing one key/value head; E = 3·Dh, so that
// H·Dh = 2·Dh ≠ E and the out-projection's K is not E: config.headDim) with that variant,
// on two inputs, and the float64 CPU reference checks each output with the tests' rule (src/util/tolerance.ts:
// |gpu − ref| ≤ atol + rtol·|ref| everywhere, NaN fails), far tighter than any indexing or
// synchronisation bug, which moves outputs by their own size. A variant for packed weights (a format:
// bits, group) is gated with random packed weights of that format, and the reference multiplies by
// the float32 values they stand for (src/quant/pack.ts unpackWeight): the dequantizing loads are
// checked with the rest.

import { referenceForward } from '../../cpu/reference.ts';
import { resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../../plan/index.ts';
import type { ForwardResult } from '../../types.ts';
import { mulberry32, uniform } from '../../util/seeded.ts';
import { compareArrays, f16Tolerance, f32Tolerance, maxAbsFinite } from '../../util/tolerance.ts';
import type { BufferPool } from '../buffers.ts';
import { forwardWebGPU } from '../forward.ts';
import { type AdapterKind, defaultChoice, type KernelChoice, type KernelName } from '../variants.ts';
import type { WeightFormat } from '../kernels/packed-weight.ts';
import { GpuLayerWeights, hostWeights } from '../weights.ts';
import { unpackWeight } from '../../quant/pack.ts';
import type { PackedWeight } from '../../quant/types.ts';

/** A random packed weight [rows, K] of `format`, its values within ±1/√K. */
function randomPacked(format: WeightFormat, rows: number, K: number, rng: () => number): PackedWeight {
  const { bits, group } = format;
  const wordsPerRow = Math.ceil((K * bits) / 32);
  const groups = Math.ceil(K / group);
  const quants = new Uint32Array(rows * wordsPerRow).map(() => Math.floor(rng() * 2 ** 32));
  const scaleOffset = new Float32Array(rows * groups * 2);
  const half = 2 ** (bits - 1);
  for (let g = 0; g < rows * groups; g++) {
    const scale = (0.5 + 0.5 * rng()) / (Math.sqrt(K) * half);
    scaleOffset[2 * g] = scale;
    scaleOffset[2 * g + 1] = scale * (half - 1 + 2 * rng());
  }
  return { bits, group, rows, cols: K, wordsPerRow, groups, quants, scaleOffset, dtype: 'nbits' };
}

export async function gateVariant(
  pool: BufferPool,
  kind: AdapterKind,
  kernel: KernelName,
  variant: string,
  headDim: number,
  format: WeightFormat | null = null,
): Promise<string | null> {
  const config = { embedDim: 3 * headDim, numHeads: 2, numKvHeads: 1, headDim };
  const spec = resolveLayerSpec(config);
  const E = spec.embedDim;
  const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
  const HD = spec.numHeads * spec.headDim; // the out-projection's K
  const rng = mulberry32(1);
  const packedIn = format ? randomPacked(format, N, E, rng) : null;
  const packedOut = format ? randomPacked(format, E, HD, rng) : null;
  const weights = resolveWeights(spec, {
    in_proj_weight: packedIn ? unpackWeight(packedIn) : uniform(N * E, 1 / Math.sqrt(E), rng),
    in_proj_bias: uniform(N, 0.1, rng),
    'out_proj.weight': packedOut ? unpackWeight(packedOut) : uniform(E * HD, 1 / Math.sqrt(HD), rng),
    'out_proj.bias': uniform(E, 0.1, rng),
  });
  const [B, S] = [2, 37];
  const choice: KernelChoice = { ...defaultChoice(kind, pool.device.features.has('subgroups')), [kernel]: variant };
  const host = hostWeights(spec, weights);
  const gpu = new GpuLayerWeights(pool, spec, packedIn && packedOut ? { ...host, inProj: packedIn, out: packedOut } : host);
  try {
    // Two inputs, one after the other: scratch buffers are reused, so an element a variant fails to
    // write would still hold the previous call's value; the second input makes that value wrong.
    for (const seed of [8, 9]) {
      const plan = resolveForwardPlan(spec, uniform(B * S * E, 1, mulberry32(seed)), { batchSize: B, seqLen: S });
      const { output } = (await forwardWebGPU(pool, gpu, plan, null, false, choice)) as ForwardResult;
      const expected = referenceForward(plan, weights).output;
      // The tests' rule (src/util/tolerance.ts), for the three reductions of a layer: E, S, H·Dh.
      const tolerance = pool.precision === 'f16' ? f16Tolerance([E, S, HD], maxAbsFinite(expected)) : f32Tolerance([E, S, HD]);
      const verdict = compareArrays(output, expected, tolerance, 1);
      if (!verdict.ok) {
        const [m] = verdict.mismatches;
        const weightsText = format ? `, packed weights of ${format.bits} bits in groups of ${format.group}` : '';
        return `output[${m.index}] = ${m.actual}, the float64 reference says ${m.expected} (head size ${headDim}, B=${B}, S=${S}${weightsText})`;
      }
    }
    return null;
  } finally {
    gpu.destroy();
  }
}
