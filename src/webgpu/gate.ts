// The tuner's correctness gate: before a kernel variant is timed on an adapter, it runs a small layer
// (B = 2, S = 37: no tile divides it; two query heads sharing one key/value head) with that variant,
// on two inputs, and the float64 CPU reference checks each output, |gpu − ref| ≤ atol + rtol·|ref| everywhere (NaN
// fails). Tolerances are loose enough for f32 or f16 rounding and far tighter than any indexing or
// synchronisation bug, which moves outputs by their own size.

import { referenceForward } from '../cpu/reference.ts';
import { resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { mulberry32, randomStateDict, uniform } from '../util/random.ts';
import type { BufferPool } from './buffers.ts';
import { forwardWebGPU, GpuLayerWeights } from './forward.ts';
import { fixedChooser } from './tuning.ts';
import { defaultChoice, type KernelChoice, type KernelName } from './variants.ts';

const TOLERANCE = { f32: { atol: 1e-4, rtol: 1e-3 }, f16: { atol: 2e-2, rtol: 2e-2 } };

export async function gateVariant(pool: BufferPool, cpuAdapter: boolean, kernel: KernelName, variant: string, headDim: number): Promise<string | null> {
  const config = { embedDim: 2 * headDim, numHeads: 2, numKvHeads: 1 };
  const spec = resolveLayerSpec(config);
  const weights = resolveWeights(spec, randomStateDict(config, 7));
  const [B, S] = [2, 37];
  const choice: KernelChoice = { ...defaultChoice(cpuAdapter), [kernel]: variant };
  const gpu = new GpuLayerWeights(pool, spec, weights);
  try {
    // Two inputs, one after the other: scratch buffers are reused, so an element a variant fails to
    // write would still hold the previous call's value; the second input makes that value wrong.
    for (const seed of [8, 9]) {
      const plan = resolveForwardPlan(spec, uniform(B * S * spec.embedDim, 1, mulberry32(seed)), { batchSize: B, seqLen: S });
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
