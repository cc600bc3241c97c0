// GGUF layers of today's open model families (scripts/make_gguf_family_fixtures.py: tiny random models
// from transformers' own config classes, written as llama.cpp's converter writes them, F32 and Q8_0),
// loaded by attentionLayerFromGguf and run on cpu, webgpu and wasm against what the family's own
// transformers attention module computes in float64: a causal prefill longer than the sliding window,
// and KV-cache decode steps (step t = row t of the prefill). Plus mutation checks: rotating a NoPE
// layer, dropping Gemma's +1 or the sliding window would each fail against the fixtures.
//
// Fixtures whose head size is not E/H (`-free`, Qwen3-0.6B-, Gemma- and gpt-oss-shaped) need
// config.headDim; until the engine takes it their forward tests are skipped (the loader tests run).
// OLMo 2 needs a QK-norm over the whole projection (qkNorm.over: 'all'); until the engine has it the
// loader refuses it, and this file checks the refusal.

import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { UnsupportedError, attentionLayerFromGguf, ggufModelLayers } from '../src/index.ts';
import type { MultiHeadAttentionConfig } from '../src/index.ts';
import { CONFIG_KEYS, QK_NORM_KEYS } from '../src/option-keys.ts';
import { compareArrays, expectClose } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';

interface FamilyFixture {
  family: string;
  architecture: string;
  embedDim: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  seqLen: number;
  blocks: number;
  window: number | null;
  layers: { layer: number; x: number[]; out: number[]; outQ8_0: number[] }[];
}

const DIR = new URL('./fixtures/gguf-families/', import.meta.url);
const set = loadJsonFixtures<FamilyFixture>(DIR, 'Regenerate them with `/work/venv/bin/python scripts/make_gguf_family_fixtures.py`.');
const TOL = { atol: 2e-4, rtol: 2e-3 };
/** Whether the engine takes a head size of its own (config.headDim, issue 39). */
const HEAD_DIM = (CONFIG_KEYS as readonly string[]).includes('headDim');
const engines = useEngines('webgpu', 'cpu', 'wasm');
const BACKENDS = ['cpu', 'wasm', 'webgpu'] as const;

const file = (fx: FamilyFixture, weights: 'f32' | 'q8_0') => new Uint8Array(readFileSync(new URL(`${fx.family}.${weights}.gguf`, DIR)));
const byName = (name: string) => set.fixtures.find((f) => f.family === name)!;
/** Whether the engine takes a QK-norm over the whole projection (config.qkNorm.over: 'all', OLMo 2). */
const QK_NORM_ALL = (QK_NORM_KEYS as readonly string[]).includes('over');
/** Families whose layers the engine cannot run yet, and why (the loader refuses them). */
const REFUSED: Record<string, RegExp> = QK_NORM_ALL ? {} : { olmo2: /OLMo 2/ };

test('the fixtures are present', () => expectFixturesPresent(set));

describe.each(set.fixtures.map((fx) => [fx.family, fx] as const))('%s', (_name, fx) => {
  const free = fx.headDim * fx.numHeads !== fx.embedDim;
  const refused = REFUSED[fx.family];
  const runnable = !refused && (!free || HEAD_DIM);

  test('ggufModelLayers lists each block as llama.cpp runs it (kind, window, rope, heads)', () => {
    const layers = ggufModelLayers(file(fx, 'f32'));
    expect(layers.length).toBe(fx.blocks);
    for (const l of layers) {
      expect(l).toMatchObject({ layer: l.layer, numHeads: fx.numHeads, numKvHeads: fx.numKvHeads, headDim: fx.headDim });
      const sliding = fx.architecture === 'gemma2' || fx.architecture === 'gpt-oss' ? l.layer % 2 === 0 : fx.architecture === 'gemma3' ? l.layer % 6 < 5 : false;
      expect(l.kind).toBe(sliding ? 'sliding' : 'full');
      expect(l.window).toBe(sliding ? fx.window : undefined);
      expect(l.rope).toBe(fx.architecture === 'smollm3' ? (l.layer + 1) % 4 !== 0 : true);
      // (A refusal read from a block's tensors shows on the blocks the fixture writes: its tested ones.)
      if (refused && fx.layers.some((e) => e.layer === l.layer)) expect(l.unsupported).toMatch(refused);
      else if (!refused) expect(l.unsupported).toBeNull();
    }
  });

  if (refused) {
    test('refused with UnsupportedError naming what is missing', async () => {
      const e = await attentionLayerFromGguf(file(fx, 'f32'), { layer: fx.layers[0].layer }).catch((err) => err);
      expect(e).toBeInstanceOf(UnsupportedError);
      expect(e.message).toMatch(refused);
    });
    return;
  }

  test.each(fx.layers.map((l) => [l.layer, l] as const))('layer %i: config and forward options', async (layer) => {
    const { config, forward } = await attentionLayerFromGguf(file(fx, 'f32'), { layer });
    expect(config.headDim).toBe(free ? fx.headDim : undefined);
    expect(config.numKvHeads).toBe(fx.numKvHeads);
    const sliding = ggufModelLayers(file(fx, 'f32'))[layer].kind === 'sliding';
    expect(forward.window).toBe(sliding ? fx.window : undefined);
    expect(forward.sinks?.length).toBe(fx.architecture === 'gpt-oss' ? fx.numHeads : undefined);
  });

  describe.each(['f32', 'q8_0'] as const)('%s weights', (weights) => {
    test.skipIf(!runnable).each(fx.layers.map((l) => [l.layer, l] as const))('layer %i: prefill on cpu, wasm and webgpu = transformers (float64)', async (layer, l) => {
      const { config, stateDict, forward } = await attentionLayerFromGguf(file(fx, weights), { layer });
      const ref = weights === 'f32' ? l.out : l.outQ8_0;
      const x = Float32Array.from(l.x);
      for (const backend of BACKENDS) {
        const mha = engines.of(backend).createMultiHeadAttention(config, stateDict);
        try {
          const { output } = await mha.forward(x, { batchSize: 1, seqLen: fx.seqLen, ...forward });
          expectClose(output, ref, TOL, `${fx.family} layer ${layer} ${weights} on ${backend}`);
        } finally {
          mha.dispose();
        }
      }
    });
  });

  test.skipIf(!runnable).each(fx.layers.map((l) => [l.layer, l] as const))(
    'layer %i: KV-cache decode, one token at a time: step t = row t of the prefill',
    async (layer, l) => {
      const { config, stateDict, forward } = await attentionLayerFromGguf(file(fx, 'f32'), { layer });
      const E = fx.embedDim;
      for (const backend of BACKENDS) {
        const mha = engines.of(backend).createMultiHeadAttention(config, stateDict);
        const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: fx.seqLen });
        try {
          for (let t = 0; t < fx.seqLen; t++) {
            const { output } = await mha.forward(Float32Array.from(l.x.slice(t * E, (t + 1) * E)), { batchSize: 1, seqLen: 1, kvCache: cache, ...forward });
            expectClose(output, l.out.slice(t * E, (t + 1) * E), TOL, `${fx.family} layer ${layer} decode step ${t} on ${backend}`);
          }
        } finally {
          cache.dispose();
          mha.dispose();
        }
      }
    },
  );
});

describe('mutation checks: a loader that broke a family rule would fail against the fixtures', () => {
  /** The cpu output of `fx`'s layer with the loaded config changed by `mutate`, compared with the fixture. */
  const mutated = async (family: string, layer: number, mutate: (c: MultiHeadAttentionConfig, f: Record<string, unknown>) => void) => {
    const fx = byName(family);
    const l = fx.layers.find((e) => e.layer === layer)!;
    const { config, stateDict, forward } = await attentionLayerFromGguf(file(fx, 'f32'), { layer });
    const f: Record<string, unknown> = { ...forward };
    mutate(config, f);
    const mha = engines.cpu.createMultiHeadAttention(config, stateDict);
    try {
      const { output } = await mha.forward(Float32Array.from(l.x), { batchSize: 1, seqLen: fx.seqLen, ...f });
      return compareArrays(output, l.out, TOL);
    } finally {
      mha.dispose();
    }
  };

  test('smollm3: rotating its NoPE layer 3 (as layer 2 is rotated) leaves the tolerance', async () => {
    const roped = (await attentionLayerFromGguf(file(byName('smollm3'), 'f32'), { layer: 2 })).config.rotary!;
    expect((await mutated('smollm3', 3, () => {})).ok).toBe(true);
    const r = await mutated('smollm3', 3, (c) => {
      c.rotary = roped;
    });
    expect(r.ok).toBe(false);
    expect(r.worstRatio).toBeGreaterThan(10);
  });

  test("gemma3: dropping the converter's +1 from the QK-norm weights leaves the tolerance", async () => {
    for (const layer of [0, 5]) {
      expect((await mutated('gemma3', layer, () => {})).ok).toBe(true);
      const r = await mutated('gemma3', layer, (c) => {
        c.qkNorm = { ...c.qkNorm!, query: c.qkNorm!.query.map((w) => w - 1), key: c.qkNorm!.key.map((w) => w - 1) };
      });
      expect(r.ok).toBe(false);
    }
  });

  test.each([
    ['gemma2', 0],
    ['gemma3', 0],
    ['gpt-oss', 0],
  ] as const)('%s layer %i: without its sliding window it leaves the tolerance', async (family, layer) => {
    const r = await mutated(family, layer, (_c, f) => {
      delete f.window;
    });
    expect(r.ok).toBe(false);
  });

  test('gemma3: the global base and linear factor on a local layer (no per-layer rope) leaves the tolerance', async () => {
    const global = (await attentionLayerFromGguf(file(byName('gemma3'), 'f32'), { layer: 5 })).config.rotary!;
    expect(global.invFreq).toBeDefined();
    const r = await mutated('gemma3', 0, (c) => {
      c.rotary = global;
    });
    expect(r.ok).toBe(false);
  });

  test('gpt-oss: without its sinks, or with plain rope for YaRN, it leaves the tolerance', async () => {
    expect((await mutated('gpt-oss', 1, (_c, f) => delete f.sinks)).ok).toBe(false);
    const r = await mutated('gpt-oss', 1, (c) => {
      c.rotary = { dim: c.rotary!.dim, interleaved: false, base: 150000 };
    });
    expect(r.ok).toBe(false);
  });

  test('gemma2: without the softcap it leaves the tolerance', async () => {
    expect((await mutated('gemma2', 1, (_c, f) => delete f.softcap)).ok).toBe(false);
  });
});
