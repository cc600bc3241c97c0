// PyTorch as an independent oracle: torch.nn.MultiheadAttention outputs, computed in float64 by
// scripts/make_fixtures.py and stored in test/fixtures/pytorch/*.json, against all three backends.
// Unlike the other numeric tests, the expected values here share no code with the engine.

import { describe, expect, test } from 'vitest';
import { referenceMultiHeadAttention } from '../src/index.ts';
import type { BatchedForwardOptions, MultiHeadAttentionConfig, StateDict } from '../src/index.ts';
import { compareArrays, expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance, type Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { withErrorScopes } from './helpers/gpu.ts';

interface Fixture {
  name: string;
  description: string;
  torch_version: string;
  config: Required<Pick<MultiHeadAttentionConfig, 'embedDim' | 'numHeads' | 'bias'>>;
  options: Required<Pick<BatchedForwardOptions, 'batchSize' | 'seqLen' | 'isCausal'>>;
  stateDict: Record<string, number[]>;
  query: number[];
  output: number[];
  /** [B, H, S, S], need_weights=True, average_attn_weights=False; small cases only. */
  attentionWeights?: number[];
}

// Read at collection time so that each fixture gets its own test; a failure to read is reported by
// the 'fixtures are present' test below rather than aborting collection with a less helpful error.
const fixtureSet = loadJsonFixtures<Omit<Fixture, 'name'>>(
  new URL('./fixtures/pytorch/', import.meta.url),
  'Regenerate them with `/usr/bin/python3 scripts/make_fixtures.py`.',
);
const { fixtures } = fixtureSet;

const engines = useEngines('webgpu', 'cpu', 'wasm');

const stateDictOf = (f: Fixture): StateDict => Object.fromEntries(Object.entries(f.stateDict).map(([k, v]) => [k, Float32Array.from(v)]));

// Tolerances. The fixture's inputs are float32 values, read back bit-exactly (make_fixtures.py checks
// that each decimal parses back to the same float32), so input rounding is identical on both sides.
//
// CPU backend: the float64 reference rounded once to float32. Rounding to nearest float32 moves a
// value by at most |ref|·2⁻²⁴; the float64 computations differ from PyTorch's by ~1e-15 relative
// (different summation orders), far below that. We allow rtol 2⁻²³ (twice the rounding bound) and
// atol 1e-12 for outputs near 0, where the float64 disagreement (~n·2⁻⁵³ of O(1)–O(25) terms) is
// the only error.
const CPU_TOLERANCE: Tolerance = { atol: 1e-12, rtol: 2 ** -23 };
// The float64 reference itself, before the rounding to float32: both sides are float64 and differ
// only in summation order and exp/sqrt implementations, ≲ (E + S + E)·2⁻⁵³ relative per pass.
// 1e-12 leaves a factor of ~100 over that for these sizes.
const F64_TOLERANCE: Tolerance = { atol: 1e-12, rtol: 1e-12 };

/** WebGPU and 'wasm' alike: float32 arithmetic, the shared rule over the layer's reductions. */
const gpuTolerance = (f: Fixture): Tolerance => f32Tolerance([f.config.embedDim, f.options.seqLen, f.config.embedDim]);

function checkFixture(f: Fixture): void {
  const { embedDim: E, numHeads: H, bias } = f.config;
  const { batchSize: B, seqLen: S } = f.options;
  expect(E % H, `${f.name}: embedDim divisible by numHeads`).toBe(0);
  expect(f.query.length, `${f.name}: query [B, S, E]`).toBe(B * S * E);
  expect(f.output.length, `${f.name}: output [B, S, E]`).toBe(B * S * E);
  const names = bias ? ['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight'] : ['in_proj_weight', 'out_proj.weight'];
  expect(Object.keys(f.stateDict).sort(), `${f.name}: state_dict names`).toEqual(names);
  for (const v of [...Object.values(f.stateDict), f.query, f.output]) {
    expect(
      v.every((x) => typeof x === 'number' && Number.isFinite(x)),
      `${f.name}: finite numbers`,
    ).toBe(true);
  }
}

/** Set FIXTURE_ERRORS=1 to print the measured errors of every comparison. */
function report(backend: string, f: Fixture, actual: ArrayLike<number>, tol: Tolerance): void {
  if (!process.env.FIXTURE_ERRORS) return;
  const r = compareArrays(actual, f.output, tol);
  let worst = 0; // max over elements of |err| / (atol + rtol·|ref|): below 1 passes
  let at = -1;
  for (let i = 0; i < actual.length; i++) {
    const ratio = Math.abs(actual[i] - f.output[i]) / (tol.atol + tol.rtol * Math.abs(f.output[i]));
    if (!(ratio <= worst)) [worst, at] = [ratio, i];
  }
  console.log(
    `${backend.padEnd(6)} ${f.name.padEnd(30)} maxAbs ${r.maxAbs.toExponential(2)} maxRel ${r.maxRel.toExponential(2)} ` +
      `worst err/allowed ${worst.toFixed(3)} at [${at}] (atol ${tol.atol.toExponential(2)}, rtol ${tol.rtol.toExponential(2)})`,
  );
}

test('the PyTorch fixtures are present and well formed', () => {
  expectFixturesPresent(fixtureSet);
  for (const f of fixtures) checkFixture(f);
});

// describe.each over an empty list would silently run nothing; the test above fails in that case.
describe.each(fixtures.map((f) => [f.name, f] as const))('%s', (_name, f) => {
  const query = Float32Array.from(f.query);
  const stateDict = stateDictOf(f);

  test('float64 reference', () => {
    const ref = referenceMultiHeadAttention(f.config, stateDict, query, f.options);
    report('f64', f, ref.output, F64_TOLERANCE);
    expectClose(ref.output, f.output, F64_TOLERANCE, `${f.name} float64 reference`);
  });

  test('cpu backend', async () => {
    const layer = engines.cpu.createMultiHeadAttention(f.config, stateDict);
    try {
      const { output } = await layer.forward(query, f.options);
      report('cpu', f, output, CPU_TOLERANCE);
      expectClose(output, f.output, CPU_TOLERANCE, `${f.name} cpu backend`);
      if (f.attentionWeights) {
        const { attentionWeights } = await layer.forward(query, { ...f.options, needWeights: true });
        expectClose(attentionWeights!, f.attentionWeights, CPU_TOLERANCE, `${f.name} cpu backend attentionWeights`);
      }
    } finally {
      layer.dispose();
    }
  });

  test('wasm backend', async () => {
    const layer = engines.wasm.createMultiHeadAttention(f.config, stateDict);
    try {
      const { output } = await layer.forward(query, f.options);
      const tol = gpuTolerance(f);
      report('wasm', f, output, tol);
      expectClose(output, f.output, tol, `${f.name} wasm backend`);
      if (f.attentionWeights) {
        const { attentionWeights } = await layer.forward(query, { ...f.options, needWeights: true });
        const logits = referenceMultiHeadAttention(f.config, stateDict, query, f.options).scores!;
        const probTol = probabilityTolerance(f.config.embedDim, f.options.seqLen, maxAbsFinite(logits));
        expectClose(attentionWeights!, f.attentionWeights, probTol, `${f.name} wasm backend attentionWeights`);
      }
    } finally {
      layer.dispose();
    }
  });

  test('webgpu backend', async () => {
    const layer = engines.gpu.createMultiHeadAttention(f.config, stateDict);
    try {
      const { output } = await withErrorScopes(engines.gpu.device!, () => layer.forward(query, f.options));
      const tol = gpuTolerance(f);
      report('webgpu', f, output, tol);
      expectClose(output, f.output, tol, `${f.name} webgpu backend`);
      if (f.attentionWeights) {
        const { attentionWeights } = await withErrorScopes(engines.gpu.device!, () => layer.forward(query, { ...f.options, needWeights: true }));
        const logits = referenceMultiHeadAttention(f.config, stateDict, query, f.options).scores!;
        const probTol = probabilityTolerance(f.config.embedDim, f.options.seqLen, maxAbsFinite(logits));
        expectClose(attentionWeights!, f.attentionWeights, probTol, `${f.name} webgpu backend attentionWeights`);
      }
    } finally {
      layer.dispose();
    }
  });
});
