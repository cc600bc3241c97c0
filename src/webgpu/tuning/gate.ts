// The tuner's correctness gate: before a kernel variant is timed on an adapter, it runs a small layer
// (B = 2, S = 37: no tile divides it; two query heads sharing one key/value head; E = 3·Dh, so that
// H·Dh = 2·Dh ≠ E and the out-projection's K is not E: config.headDim) with that variant,
// on two inputs, and the float64 CPU reference checks each output with the tests' rule (src/util/tolerance.ts:
// |gpu − ref| ≤ atol + rtol·|ref| everywhere, NaN fails), far tighter than any indexing or
// synchronisation bug, which moves outputs by their own size. A variant for packed weights (a format:
// bits, group) is gated with random packed weights of that format, and the reference multiplies by
// the float32 values they stand for (src/quant/pack.ts unpackWeight): the dequantizing loads are
// checked with the rest. An attention variant for a KV cache kept as another type (a kvFormat: 'q8_0',
// 'q4_0', 'f16x2', 'f32') runs the layer through such a cache: a prefill of S, then a decode step,
// each checked against the float64 reference over the cache's own (dequantized) values.

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
import { attention, outputProjection, qkvProjection } from '../../cpu/reference.ts';
import { KvCache } from '../../kv-cache.ts';
import { geometryOf, type LayerSpec, type LayerWeights } from '../../plan/index.ts';
import type { KvCacheDtype } from '../../types.ts';
import type { KvFormat } from '../kernels/attention-fields.ts';
import { WebGPUKvCache } from '../kv-cache.ts';
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
  kvFormat?: KvFormat,
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
    if (kvFormat) return await gateCached(pool, spec, weights, gpu, choice, kvFormat);
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

/** The cache dtype that a KV format stores. */
const DTYPE_OF: Record<KvFormat, KvCacheDtype> = { f32: 'f32', f16x2: 'f16', q8_0: 'q8_0', q4_0: 'q4_0' };

/**
 * The gate through a KV cache kept as `kvFormat`: B = 2, a prefill of 37 tokens then one decode step,
 * each output against the float64 reference over the cache's values after the call (read back: what
 * the variant read), queries and the output projection the reference's own.
 */
async function gateCached(
  pool: BufferPool,
  spec: LayerSpec,
  weights: LayerWeights,
  gpu: GpuLayerWeights,
  choice: KernelChoice,
  kvFormat: KvFormat,
): Promise<string | null> {
  const [B, S] = [2, 37];
  const E = spec.embedDim;
  const dtype = DTYPE_OF[kvFormat];
  const device = pool.device;
  const host = { current: () => ({ pool, generation: 0 }), limits: () => device.limits };
  const storage = new WebGPUKvCache(host, B, spec.numKvHeads, S + 1, spec.headDim, dtype);
  const cache = new KvCache(B, S + 1, dtype, storage, gpu);
  try {
    for (const [seed, Sq] of [
      [8, S],
      [9, 1],
    ] as const) {
      const x = uniform(B * Sq * E, 1, mulberry32(seed));
      const plan = resolveForwardPlan(spec, x, { batchSize: B, seqLen: Sq, kvCache: cache, isCausal: true });
      const { output } = (await forwardWebGPU(pool, gpu, plan, storage.live(0), false, choice)) as ForwardResult;
      cache.advance(Sq);
      const { key, value } = await storage.read(cache.length);
      const own = { ...plan, kvSeqLen: Sq, geometry: geometryOf('self', B, Sq, Sq), cache: null };
      const { q } = qkvProjection(own, weights);
      const expected = outputProjection(plan, weights, attention(plan, q, Float64Array.from(key), Float64Array.from(value)));
      const Skv = plan.kvSeqLen;
      const tolerance = pool.precision === 'f16' ? f16Tolerance([E, Skv, E], maxAbsFinite(expected)) : f32Tolerance([E, Skv, E]);
      const verdict = compareArrays(output, expected, tolerance, 1);
      if (!verdict.ok) {
        const [m] = verdict.mismatches;
        return `output[${m.index}] = ${m.actual}, the float64 reference over the cache's values says ${m.expected} (head size ${spec.headDim}, a '${dtype}' cache, B=${B}, ${Sq === 1 ? 'a decode step' : `a prefill of ${Sq}`})`;
      }
    }
    return null;
  } finally {
    storage.dispose();
  }
}
