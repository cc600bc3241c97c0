// Linear attention (φ = elu + 1): engine.linearAttention and layers with config.attention = 'linear'.
// PyTorch is the oracle (scripts/make_linear_fixtures.py: the LinearAttention module with einsum and
// cumsum, checked there against the quadratic form) on both backends; WebGPU against the float64
// CPU backend over a grid crossing the kernels' regimes (direct loop for ≤ 16 query rows, chunks of
// 64 keys with prefix sums above), causal or not, padded keys, GQA, odd head sizes, f16; a layer's
// KV-cache decode against its full causal forward; rotary and QK-norm before φ; and the bad input.

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, InvalidArgumentError, type LinearAttentionOptions, type StateDict, UnsupportedError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

interface LinearFixture {
  description: string;
  kind: 'mha' | 'linear';
  config: Record<string, unknown>;
  options: Record<string, unknown> & { types?: Record<string, 'uint8'> };
  stateDict?: Record<string, number[]>;
  query: number[];
  key?: number[];
  value?: number[];
  output: number[];
}

const set = loadJsonFixtures<LinearFixture>(
  new URL('./fixtures/pytorch-linear/', import.meta.url),
  'Regenerate them with `/usr/bin/python3 scripts/make_linear_fixtures.py`.',
);
const engines = useEngines();

function optionsOf(f: LinearFixture): Record<string, unknown> {
  const { types, ...o } = f.options;
  for (const name of Object.keys(types ?? {})) o[name] = Uint8Array.from(o[name] as number[]);
  return o;
}

test('the fixtures are present and well formed', () => {
  expectFixturesPresent(set);
  expect(set.fixtures.length).toBeGreaterThanOrEqual(8);
});

describe.each(['webgpu', 'cpu'] as const)('%s against PyTorch', (backend) => {
  test.each(set.fixtures.map((f) => [f.name, f] as const))('%s', async (_name, f) => {
    const engine = engines.of(backend);
    const options = optionsOf(f);
    const expected = Float64Array.from(f.output);
    const S = Number(f.options.kvSeqLen ?? f.options.seqLen);
    if (f.kind === 'linear') {
      const [q, k, v] = [f.query, f.key!, f.value!].map((a) => Float32Array.from(a));
      const { output } = await withErrorScopes(engines.gpu.device!, () => engine.linearAttention(q, k, v, options as unknown as LinearAttentionOptions));
      const Dh = Number(f.config.headDim);
      expectClose(output, expected, f32Tolerance([Dh, S, Dh]), f.name);
      return;
    }
    const sd: StateDict = Object.fromEntries(Object.entries(f.stateDict!).map(([k, v]) => [k, Float32Array.from(v)]));
    const mha = engine.createMultiHeadAttention(f.config as never, sd);
    const { output } = await withErrorScopes(engines.gpu.device!, () => mha.forward(Float32Array.from(f.query), options as unknown as ForwardOptions));
    const E = Number(f.config.embedDim);
    expectClose(output, expected, f32Tolerance([E, E, S, E]), f.name);
    mha.dispose();
  });
});

describe('WebGPU against the CPU backend', () => {
  // Sq around the direct/chunked switch (16) and the 64-key chunks; Skv ≠ Sq too.
  const grid: [number, number, number, number, number, number][] = [
    // B, H, G, Sq, Skv, Dh
    [1, 1, 1, 1, 1, 4],
    [2, 2, 1, 16, 16, 8],
    [1, 2, 2, 17, 17, 8],
    [1, 4, 2, 64, 64, 16],
    [2, 2, 1, 65, 65, 3],
    [1, 2, 2, 129, 129, 32],
    [1, 2, 1, 33, 200, 12],
    [1, 1, 1, 8, 300, 64],
  ];
  test.each(grid.flatMap((g) => [true, false].map((c) => [...g, c] as const)))('B=%i H=%i G=%i Sq=%i Skv=%i Dh=%i causal=%s', async (B, H, G, Sq, Skv, Dh, isCausal) => {
    const r = mulberry32(B * 1000 + Sq * 7 + Skv + Dh);
    const q = uniform(B * H * Sq * Dh, 2, r);
    const k = uniform(B * G * Skv * Dh, 2, r);
    const v = uniform(B * G * Skv * Dh, 1, r);
    const keyPaddingMask = Uint8Array.from({ length: B * Skv }, (_, i) => (i % 5 === 3 ? 1 : 0));
    const options = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal, keyPaddingMask };
    const got = await withErrorScopes(engines.gpu.device!, () => engines.gpu.linearAttention(q, k, v, options));
    const want = await engines.cpu.linearAttention(q, k, v, options);
    expectClose(got.output, want.output, f32Tolerance([Dh, Skv, Dh]), 'output');
  });

  test("precision 'f16'", async () => {
    const engine = await createGpuEngine({ precision: 'f16' });
    const [B, H, Sq, Dh] = [1, 2, 100, 16];
    const r = mulberry32(5);
    const [q, k, v] = [0, 1, 2].map(() => uniform(B * H * Sq * Dh, 1, r));
    const options = { batchSize: B, numHeads: H, seqLen: Sq, headDim: Dh, isCausal: true };
    const got = await withErrorScopes(engine.device!, () => engine.linearAttention(q, k, v, options));
    const want = (await engines.cpu.linearAttention(q, k, v, options)).output;
    expectClose(got.output, want, f16Tolerance([Dh, Sq], maxAbsFinite(want)), 'f16 output');
    engine.dispose();
  });
});

describe("layers with attention 'linear'", () => {
  test.each(['webgpu', 'cpu'] as const)('%s: KV-cache prefill and decode equal the full causal forward', async (backend) => {
    const config = { embedDim: 24, numHeads: 4, numKvHeads: 2, attention: 'linear' as const };
    const sd = randomStateDict(config, 11);
    const [B, S, E] = [2, 40, 24];
    const x = uniform(B * S * E, 1, mulberry32(12));
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const full = (await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true })).output;
    const rows = (from: number, to: number) => {
      const out = new Float32Array(B * (to - from) * E);
      for (let b = 0; b < B; b++) out.set(x.subarray((b * S + from) * E, (b * S + to) * E), b * (to - from) * E);
      return out;
    };
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
    const prefill = 36; // chunked on WebGPU (more than 16 rows); the decode steps loop directly
    const got = new Float32Array(B * S * E);
    const place = (out: Float32Array, from: number, to: number) => {
      for (let b = 0; b < B; b++) got.set(out.subarray(b * (to - from) * E, (b + 1) * (to - from) * E), (b * S + from) * E);
    };
    place((await mha.forward(rows(0, prefill), { batchSize: B, seqLen: prefill, kvCache: cache, isCausal: true })).output, 0, prefill);
    for (let t = prefill; t < S; t++) place((await mha.forward(rows(t, t + 1), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true })).output, t, t + 1);
    expectClose(got, full, f32Tolerance([E, E, S, E]), 'decoded');
    mha.dispose();
  });

  test('rotary and QK-norm apply before φ: WebGPU equals the CPU backend (Dh = 6, padded)', async () => {
    const config = {
      embedDim: 18,
      numHeads: 3,
      attention: 'linear' as const,
      rotary: { dim: 4 },
      qkNorm: { query: Float32Array.from([1, 0.5, 2, 1, 1.5, 0.8]), key: Float32Array.from([0.9, 1.1, 1, 1, 0.7, 1.3]) },
    };
    const sd = randomStateDict(config, 21);
    const x = uniform(2 * 30 * 18, 1, mulberry32(22));
    const options = { batchSize: 2, seqLen: 30, isCausal: true };
    const got = await withErrorScopes(engines.gpu.device!, () => engines.gpu.createMultiHeadAttention(config, sd).forward(x, options));
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, options);
    expectClose(got.output, want.output, f32Tolerance([18, 18, 30, 18]), 'rotary + qkNorm + linear');
    // and the layer differs from softmax attention with the same weights
    const softmax = await engines.cpu.createMultiHeadAttention({ ...config, attention: 'softmax' }, sd).forward(x, options);
    expect(Math.max(...softmax.output.map((v, i) => Math.abs(v - want.output[i])))).toBeGreaterThan(1e-3);
  });
});

describe('bad input', () => {
  const [q, k, v] = [new Float32Array(8), new Float32Array(8), new Float32Array(8)];
  const ok = { batchSize: 1, numHeads: 1, seqLen: 2, headDim: 4 };

  test.each(['webgpu', 'cpu'] as const)('%s: linearAttention arguments', async (backend) => {
    const engine = engines.of(backend);
    await expect(engine.linearAttention(q, k, v, { ...ok, needWeights: true })).rejects.toThrow(InvalidArgumentError);
    await expect(engine.linearAttention(q, k, v, { ...ok, needWeights: true })).rejects.toThrow(/needWeights.*never forms/s);
    await expect(engine.linearAttention(q, k, v, { ...ok, eps: 0 })).rejects.toThrow(/options\.eps.*> 0/s);
    await expect(engine.linearAttention(q, k, new Float32Array(7), ok)).rejects.toThrow(/value.*\[B, G, Skv, Dh\] = \[1, 1, 2, 4\] = 8/s);
    await expect(engine.linearAttention(q, k, v, { ...ok, keyPaddingMask: new Uint8Array(3) })).rejects.toThrow(/keyPaddingMask/);
    await expect(engine.linearAttention(q, k, v, { ...ok, numKvHeads: 3 } as never)).rejects.toThrow(/numKvHeads.*divisor/s);
    await expect(engine.linearAttention(q, k, v, { ...ok, softcap: 2 } as never)).rejects.toThrow(/softcap/);
  });

  test.each(['webgpu', 'cpu'] as const)('%s: a linear layer refuses what only a softmax has, naming the option', async (backend) => {
    const engine = engines.of(backend);
    const config = { embedDim: 8, numHeads: 2, attention: 'linear' as const };
    const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
    const x = new Float32Array(16);
    const base = { batchSize: 1, seqLen: 2 };
    await expect(mha.forward(x, { ...base, needWeights: true })).rejects.toThrow(InvalidArgumentError);
    for (const [name, value] of [
      ['attnMask', new Float32Array(4)],
      ['window', 1],
      ['headMask', new Float32Array(2)],
      ['scale', 0.5],
      ['softcap', 3],
      ['sinks', new Float32Array(2)],
      ['alibiSlopes', new Float32Array(2)],
    ] as const) {
      await expect(mha.forward(x, { ...base, [name]: value }), name).rejects.toThrow(UnsupportedError);
      await expect(mha.forward(x, { ...base, [name]: value }), name).rejects.toThrow(`options.${name}`);
    }
    await expect(mha.forward(x, { seqLen: 2, cuSeqlens: Int32Array.from([0, 2]) } as never)).rejects.toThrow(/cuSeqlens/);
    expect(() => engine.createMultiHeadAttention({ ...config, attention: 'quadratic' } as never, randomStateDict(config, 1))).toThrow(
      /config\.attention.*"softmax".*"linear"/s,
    );
    const scoreMod = { wgsl: 'fn scoreMod(s: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return s; }', reference: (s: number) => s };
    expect(() => engine.createMultiHeadAttention({ ...config, scoreMod }, randomStateDict(config, 1))).toThrow(UnsupportedError);
    mha.dispose();
  });
});
