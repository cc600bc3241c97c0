// The tuner's correctness gate: before a kernel variant is timed on an adapter, it runs a small layer
// (B = 2, S = 37: no tile divides it; two query heads sharing one key/value head) with that variant,
// on two inputs, and the float64 CPU reference checks each output, |gpu − ref| ≤ atol + rtol·|ref| everywhere (NaN
// fails). Tolerances are loose enough for f32 or f16 rounding and far tighter than any indexing or
// synchronisation bug, which moves outputs by their own size.

import { referenceForward } from '../cpu/reference.ts';
import { resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import type { BufferPool } from './buffers.ts';
import { forwardWebGPU, GpuLayerWeights } from './forward.ts';
import { fixedChooser } from './tuning.ts';
import { defaultChoice, type KernelChoice, type KernelName } from './variants.ts';

const TOLERANCE = { f32: { atol: 1e-4, rtol: 1e-3 }, f16: { atol: 2e-2, rtol: 2e-2 } };

export async function gateVariant(pool: BufferPool, cpuAdapter: boolean, kernel: KernelName, variant: string, headDim: number): Promise<string | null> {
  const config = { embedDim: 2 * headDim, numHeads: 2, numKvHeads: 1 };
  const spec = resolveLayerSpec(config);
  const E = spec.embedDim;
  const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
  const weights = resolveWeights(spec, {
    in_proj_weight: values(N * E, 1, 1 / Math.sqrt(E)),
    in_proj_bias: values(N, 2, 0.1),
    'out_proj.weight': values(E * E, 3, 1 / Math.sqrt(E)),
    'out_proj.bias': values(E, 4, 0.1),
  });
  const [B, S] = [2, 37];
  const choice: KernelChoice = { ...defaultChoice(cpuAdapter), [kernel]: variant };
  const gpu = new GpuLayerWeights(pool, spec, weights);
  try {
    // Two inputs, one after the other: scratch buffers are reused, so an element a variant fails to
    // write would still hold the previous call's value; the second input makes that value wrong.
    for (const seed of [8, 9]) {
      const plan = resolveForwardPlan(spec, values(B * S * E, seed, 1), { batchSize: B, seqLen: S });
      const { output } = (await forwardWebGPU(pool, gpu, plan, null, false, fixedChooser(choice))) as ForwardResult;
      const expected = referenceForward(plan, weights).output;
      const { atol, rtol } = TOLERANCE[pool.precision];
      for (let i = 0; i < expected.length; i++) {
        const error = Math.abs(output[i] - expected[i]);
        if (!(error <= atol + rtol * Math.abs(expected[i]))) {
          return `output[${i}] = ${output[i]}, the float64 reference says ${expected[i]} (head size ${headDim}, B=${B}, S=${S})`;
        }
      }
    }
    return null;
  } finally {
    gpu.destroy();
  }
}

/** n values in (−scale, scale), different for each seed, with no pattern a tile size could line up with. */
function values(n: number, seed: number, scale: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const x = Math.sin(i * 12.9898 + seed * 78.233) * 43758.5453;
    out[i] = (2 * (x - Math.floor(x)) - 1) * scale;
  }
  return out;
}
