// Precision 'f16' with the options of today's models: score options (scale, softcap, ALiBi, sinks),
// rotary embeddings and QK-norm, and a custom scoreMod, against the float64 reference with the f16
// tolerance rule (storage in float16, arithmetic in float32).

import { expect, test } from 'vitest';
import type { AttentionEngine, ForwardOptions, MultiHeadAttentionConfig } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines('cpu');
const L = { embedDim: 64, numHeads: 4, numKvHeads: 2 };
const sd = randomStateDict(L, 61);
const r = mulberry32(62);
const qkNorm = { query: uniform(16, 1, r).map((v) => 1 + 0.3 * v), key: uniform(16, 1, r).map((v) => 1 + 0.3 * v) };
const scoreMod = {
  wgsl: 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return score - 0.02 * f32(i - min(i, j)); }',
  reference: (s: number, _b: number, _h: number, i: number, j: number) => s - 0.02 * (i - Math.min(i, j)),
};

test.each<[string, Partial<MultiHeadAttentionConfig>, Partial<ForwardOptions>]>([
  ['score options', {}, { scale: 0.2, softcap: 3, alibiSlopes: Float32Array.from([0.5, 0.25, 0.125, 0.0625]), sinks: Float32Array.from([0, 1, -1, 2]) }],
  ['rotary and QK-norm', { rotary: { dim: 12 }, qkNorm }, {}],
  ['scoreMod', { scoreMod }, {}],
])('%s', async (_name, config, extra) => {
  const engine: AttentionEngine = await createGpuEngine({ precision: 'f16' });
  expect(engine.precision).toBe('f16');
  const [B, S] = [2, 19];
  const x = uniform(B * S * L.embedDim, 1, mulberry32(S));
  const options = { batchSize: B, seqLen: S, isCausal: true, ...extra } as ForwardOptions;
  const gpu = engine.createMultiHeadAttention({ ...L, ...config }, sd);
  const cpu = engines.cpu.createMultiHeadAttention({ ...L, ...config }, sd);
  const g = await withErrorScopes(engine.device!, () => gpu.forward(x, options));
  const c = await cpu.forward(x, options);
  expectClose(g.output, c.output, f16Tolerance([L.embedDim, S, L.embedDim], maxAbsFinite(c.output)), 'output');
  engine.dispose();
});
