// PyTorch as an independent oracle for the options of today's models: rotary embeddings (Llama's
// halves, GPT-J's interleaved pairs on a partial dim with left-padded position ids, given tables),
// QK-norm with rotary (Qwen3), softcap with a custom scale and a window (Gemma 2), attention sinks
// (gpt-oss) and smooth softmax, ALiBi, all score options together, and scaledDotProductAttention with
// rotary over the last keys. The expected values come from scripts/make_model_fixtures.py (float64
// torch, the models' own formulas, each checked against a second form there) in
// test/fixtures/pytorch-models/*.json, and share no code with the engine. All three backends are checked,
// and the Llama case also as KV-cache decoding.

import { describe, expect, test } from 'vitest';
import type { AttentionEngine, ForwardResult, MultiHeadAttentionConfig, ScaledDotProductAttentionOptions, StateDict } from '../src/index.ts';
import { expectClose, maxAbsFinite, outputTolerance, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { withErrorScopes } from './helpers/gpu.ts';

interface ModelFixture {
  description: string;
  torch_version: string;
  kind: 'mha' | 'sdpa';
  config: Record<string, unknown>;
  options: Record<string, unknown> & { types?: Record<string, 'float32' | 'int32'> };
  stateDict?: Record<string, number[]>;
  query: number[];
  key?: number[];
  value?: number[];
  output: number[];
  attentionWeights: number[];
  maxAbsLogit: number;
}

const set = loadJsonFixtures<ModelFixture>(
  new URL('./fixtures/pytorch-models/', import.meta.url),
  'Regenerate them with `/usr/bin/python3 scripts/make_model_fixtures.py`.',
);
const engines = useEngines('webgpu', 'cpu', 'wasm');

/** The fixture's config with its arrays (rotary tables, QK-norm weights) as Float32Array. */
function configOf(f: ModelFixture): MultiHeadAttentionConfig {
  const c = structuredClone(f.config) as Record<string, Record<string, unknown>>;
  if (c.rotary?.cos) {
    c.rotary.cos = Float32Array.from(c.rotary.cos as number[]);
    c.rotary.sin = Float32Array.from(c.rotary.sin as number[]);
  }
  if (c.qkNorm) {
    c.qkNorm.query = Float32Array.from(c.qkNorm.query as number[]);
    c.qkNorm.key = Float32Array.from(c.qkNorm.key as number[]);
  }
  return c as unknown as MultiHeadAttentionConfig;
}

/** The fixture's options with the arrays named in `types` as typed arrays, needWeights on. */
function optionsOf(f: ModelFixture): Record<string, unknown> {
  const { types, ...o } = f.options;
  for (const [name, kind] of Object.entries(types ?? {})) o[name] = kind === 'int32' ? Int32Array.from(o[name] as number[]) : Float32Array.from(o[name] as number[]);
  return { ...o, needWeights: true };
}

async function run(engine: AttentionEngine, f: ModelFixture): Promise<ForwardResult> {
  const options = optionsOf(f);
  if (f.kind === 'sdpa') {
    const [q, k, v] = [f.query, f.key!, f.value!].map((a) => Float32Array.from(a));
    return withErrorScopes(engines.gpu.device!, () => engine.scaledDotProductAttention(q, k, v, options as unknown as ScaledDotProductAttentionOptions));
  }
  const sd: StateDict = Object.fromEntries(Object.entries(f.stateDict!).map(([k, v]) => [k, Float32Array.from(v)]));
  const mha = engine.createMultiHeadAttention(configOf(f), sd);
  try {
    return (await withErrorScopes(engines.gpu.device!, () => mha.forward(Float32Array.from(f.query), options as never))) as unknown as ForwardResult;
  } finally {
    mha.dispose();
  }
}

test('the fixtures are present and well formed', () => {
  expectFixturesPresent(set);
  expect(set.fixtures.length).toBeGreaterThanOrEqual(10);
});

describe.each(['webgpu', 'cpu', 'wasm'] as const)('%s against PyTorch', (backend) => {
  test.each(set.fixtures.map((f) => [f.name, f] as const))('%s', async (_name, f) => {
    const r = await run(engines.of(backend), f);
    const S = Number(f.options.kvSeqLen ?? f.options.seqLen);
    const width = f.kind === 'sdpa' ? Number(f.config.headDim) : Number(f.config.embedDim);
    const expected = Float64Array.from(f.output);
    expectClose(r.output, expected, outputTolerance([width, S, width], f.maxAbsLogit, maxAbsFinite(expected)), `${f.name}: output`);
    expectClose(r.attentionWeights!, Float64Array.from(f.attentionWeights), probabilityTolerance(width, S, f.maxAbsLogit), `${f.name}: attentionWeights`);
  });
});

test.each(['webgpu', 'cpu', 'wasm'] as const)('%s: the Llama case decoded with a KV cache equals PyTorch', async (backend) => {
  const f = set.fixtures.find((x) => x.name === 'llama-rotary-gqa')!;
  const { batchSize: B, seqLen: S } = f.options as { batchSize: number; seqLen: number };
  const E = Number(f.config.embedDim);
  const sd: StateDict = Object.fromEntries(Object.entries(f.stateDict!).map(([k, v]) => [k, Float32Array.from(v)]));
  const mha = engines.of(backend).createMultiHeadAttention(configOf(f), sd);
  const x = Float32Array.from(f.query);
  const rows = (from: number, to: number) => {
    const out = new Float32Array(B * (to - from) * E);
    for (let b = 0; b < B; b++) out.set(x.subarray((b * S + from) * E, (b * S + to) * E), b * (to - from) * E);
    return out;
  };
  const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
  const decoded = new Float32Array(B * S * E);
  const place = (out: Float32Array, from: number, to: number) => {
    for (let b = 0; b < B; b++) decoded.set(out.subarray(b * (to - from) * E, (b + 1) * (to - from) * E), (b * S + from) * E);
  };
  const prefill = S - 3;
  place((await mha.forward(rows(0, prefill), { batchSize: B, seqLen: prefill, kvCache: cache, isCausal: true })).output, 0, prefill);
  for (let t = prefill; t < S; t++) place((await mha.forward(rows(t, t + 1), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true })).output, t, t + 1);
  const expected = Float64Array.from(f.output);
  expectClose(decoded, expected, outputTolerance([E, S, E], f.maxAbsLogit, maxAbsFinite(expected)), 'decoded');
  mha.dispose();
});
