// Seeded random tensors and weights, so every test, demo run and benchmark can be replayed from its seed.
// Not part of the package: the tests, e2e pages, demo, benchmark and scripts import it from here; the
// generator itself is src/util/seeded.ts (the tuner's gate draws from it too).

import type { StateDict } from '../../src/types.ts';
import { mulberry32, uniform } from '../../src/util/seeded.ts';

export { mulberry32, uniform };

/**
 * Weights for an nn.MultiheadAttention-shaped layer, initialised as PyTorch does for the matrices
 * (xavier_uniform for in_proj_weight, ±1/√E for out_proj.weight). Biases, which PyTorch starts at 0,
 * are random here (±0.1) so that tests exercise them.
 */
export function randomStateDict(config: { embedDim: number; numHeads: number; numKvHeads?: number; headDim?: number; bias?: boolean }, seed: number): StateDict {
  const rng = mulberry32(seed);
  const E = config.embedDim;
  const H = config.numHeads;
  const G = config.numKvHeads ?? H;
  const Dh = config.headDim ?? E / H;
  const N = (H + 2 * G) * Dh;
  const sd: StateDict = {
    in_proj_weight: uniform(N * E, Math.sqrt(6 / (E + N)), rng),
    'out_proj.weight': uniform(E * H * Dh, 1 / Math.sqrt(H * Dh), rng),
  };
  if (config.bias ?? true) {
    sd.in_proj_bias = uniform(N, 0.1, rng);
    sd['out_proj.bias'] = uniform(E, 0.1, rng);
  }
  return sd;
}

/**
 * One layer's seeded inputs: its weights (randomStateDict from `seed`) and `rows` query rows of E
 * values uniform in [−1, 1) from a second stream (seed XOR 0x9e3779b9), [rows, E] (rows = B·S for a
 * batch). The e2e cases, the benchmark, the demo's panels and the scripts build their layers from this,
 * so a case replays everywhere from its seed.
 */
export function randomLayerInputs(
  config: { embedDim: number; numHeads: number; numKvHeads?: number; bias?: boolean },
  rows: number,
  seed: number,
): { stateDict: StateDict; query: Float32Array } {
  const stateDict = randomStateDict(config, seed);
  const query = uniform(rows * config.embedDim, 1, mulberry32((seed ^ 0x9e3779b9) >>> 0));
  return { stateDict, query };
}
