// The config.json files the published checkpoints of issue 39's families carry (test/fixtures/hf-configs/,
// each saying in `_fixture_source` whether it is verbatim from a cited copy or reconstructed, and from
// what), read as a new user would: hfModelLayers(config) and attentionLayerFromHf(config, weights, …).
//
// Three sources of truth, kept apart from the loader:
// - the model cards (CARDS below, written by hand): layer count, heads, head sizes, the layer pattern
//   (Gemma 3's 5 local : 1 global, gpt-oss alternating, SmolLM3's NoPE every 4th layer, Qwen3-Next's
//   3 linear : 1 full, …), windows;
// - transformers 5.18 itself (expected.json, made by scripts/make_hf_config_expectations.py from each
//   family's own attention module and rotary embedding): per layer its head size, KV heads, scaling,
//   window, softcap, sinks, use of rope, and the rotary inv_freq and attention_scaling;
// - the checkpoints' own tensor names and shapes (TENSORS below), from which random weights of one full
//   and one sliding (or NoPE) layer are built, loaded with attentionLayerFromHf and run on the 'cpu'
//   engine for 3 tokens. Layers over 70 MiB of float32 weights are not built (their config-derived
//   outputs are still checked, for every layer of every model).
// Each config is also read as transformers 5's save_pretrained writes the same model (v5/<name>.json,
// made by that script): the loader must see the same layers in both spellings. (It did not for Gemma 4
// E2B: transformers writes per_layer_config keys zero-padded, "04" … "34", which the loader missed and
// listed the full layers with head size 256 instead of 512; fixed in hf-config.ts.)

import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { attentionLayerFromHf, hfModelLayers, InvalidArgumentError, UnsupportedError } from '../src/index.ts';
import type { HfAttentionLayer, SafetensorsFile } from '../src/index.ts';
import { ENGINE_FEATURES, type EngineFeatures, parseHfConfig } from '../src/weights/hf-config.ts';
import { loadHfLayer } from '../src/weights/hf.ts';
import { useEngines } from './helpers/engines.ts';

const dir = new URL('./fixtures/hf-configs/', import.meta.url);
const REGENERATE = 'Regenerate expected.json with `/work/venv/bin/python scripts/make_hf_config_expectations.py`.';

type Json = Record<string, unknown>;
const config = (name: string): Json => JSON.parse(readFileSync(new URL(`${name}.json`, dir), 'utf8')) as Json;
/** The same model as transformers 5's save_pretrained writes it (scripts/make_hf_config_expectations.py). */
const v5 = (name: string): Json => JSON.parse(readFileSync(new URL(`v5/${name}.json`, dir), 'utf8')) as Json;

interface ExpectedLayer {
  type: string;
  headDim: number;
  numHeads: number;
  numKvHeads: number | null;
  qRows: number | null;
  scaling: number;
  slidingWindow: number | null;
  softcap: number | null;
  sinks: boolean;
  useRope: boolean;
  kvShared: boolean;
}
interface ExpectedRope {
  n: number;
  first: number;
  last: number;
  invFreq: number[];
  attentionScaling: number;
}
interface ExpectedModel {
  modelType: string;
  attentionClass: string;
  hiddenSize: number;
  numLayers: number;
  kinds: (ExpectedLayer | { type: 'linear_attention' })[];
  layerKind: number[];
  rope: Record<string, ExpectedRope>;
}
const expected = JSON.parse(readFileSync(new URL('expected.json', dir), 'utf8')) as { transformers: string; models: Record<string, ExpectedModel> };
const transformersLayer = (m: ExpectedModel, L: number) => m.kinds[m.layerKind[L]];

/** What each model card says (hand-written, independent of the loader and of transformers). */
interface Card {
  layers: number;
  E: number;
  H: number;
  G: number;
  /** Head size; a function where it differs per layer (Gemma 4: 512 on full layers). */
  Dh: number | ((L: number) => number);
  kind: (L: number) => 'full' | 'sliding' | 'linear';
  window?: number;
  /** NoPE layers (SmolLM3). */
  nope?: (L: number) => boolean;
  /** Rotated features per head where not all of them (partial rotary). */
  rotaryDim?: (L: number) => number;
  /** The layers to build: one full and one sliding (SmolLM3: one NoPE). */
  build: number[];
}
const full = () => 'full' as const;
const CARDS: Record<string, Card> = {
  'qwen3-0.6b': { layers: 28, E: 1024, H: 16, G: 8, Dh: 128, kind: full, build: [0] },
  'qwen3-4b': { layers: 36, E: 2560, H: 32, G: 8, Dh: 128, kind: full, build: [0] },
  'qwen3-next-80b-a3b-instruct': {
    layers: 48,
    E: 2048,
    H: 16,
    G: 2,
    Dh: 256,
    kind: (L) => ((L + 1) % 4 === 0 ? 'full' : 'linear'),
    rotaryDim: () => 64,
    build: [3],
  },
  'qwen3.5-0.8b': { layers: 24, E: 1024, H: 8, G: 2, Dh: 256, kind: (L) => ((L + 1) % 4 === 0 ? 'full' : 'linear'), rotaryDim: () => 64, build: [3] },
  'gemma-2-2b-it': { layers: 26, E: 2304, H: 8, G: 4, Dh: 256, kind: (L) => (L % 2 === 0 ? 'sliding' : 'full'), window: 4096, build: [0, 1] },
  'gemma-3-1b-it': { layers: 26, E: 1152, H: 4, G: 1, Dh: 256, kind: (L) => ((L + 1) % 6 === 0 ? 'full' : 'sliding'), window: 512, build: [0, 5] },
  'gemma-3-4b-it': { layers: 34, E: 2560, H: 8, G: 4, Dh: 256, kind: (L) => ((L + 1) % 6 === 0 ? 'full' : 'sliding'), window: 1024, build: [0, 5] },
  'gemma-4-e2b-it': {
    layers: 35,
    E: 1536,
    H: 8,
    G: 1,
    Dh: (L) => ((L + 1) % 5 === 0 ? 512 : 256),
    kind: (L) => ((L + 1) % 5 === 0 ? 'full' : 'sliding'),
    window: 512,
    build: [0, 4],
  },
  'gpt-oss-20b': { layers: 24, E: 2880, H: 64, G: 8, Dh: 64, kind: (L) => (L % 2 === 0 ? 'sliding' : 'full'), window: 128, build: [0, 1] },
  'smollm3-3b': { layers: 36, E: 2048, H: 16, G: 4, Dh: 128, kind: full, nope: (L) => (L + 1) % 4 === 0, build: [0, 3] },
  'phi-4-mini-instruct': { layers: 32, E: 3072, H: 24, G: 8, Dh: 128, kind: () => 'sliding', window: 262144, rotaryDim: () => 96, build: [0] },
  'phi-3-mini-4k-instruct': { layers: 32, E: 3072, H: 32, G: 32, Dh: 96, kind: () => 'sliding', window: 2047, build: [0] },
  'llama-3.2-1b': { layers: 16, E: 2048, H: 32, G: 8, Dh: 64, kind: full, build: [0] },
  'mistral-7b-v0.1': { layers: 32, E: 4096, H: 32, G: 8, Dh: 128, kind: () => 'sliding', window: 4096, build: [0] },
  'olmo-2-0425-1b': { layers: 16, E: 2048, H: 16, G: 16, Dh: 128, kind: full, build: [0] },
  'qwen2.5-0.5b': { layers: 24, E: 896, H: 14, G: 2, Dh: 64, kind: full, build: [0] },
};
const headDim = (c: Card, L: number) => (typeof c.Dh === 'function' ? c.Dh(L) : c.Dh);

/**
 * The attention tensors of the published checkpoints (their names as save_pretrained wrote them):
 * prefix, fused qkv (Phi-3), biases, QK-norms, sinks, q_proj carrying the output gate (Qwen3-Next/3.5).
 */
interface TensorLayout {
  prefix: string;
  fused?: boolean;
  bias?: 'qkv' | 'qkvo';
  norm?: 'head' | 'all';
  sinks?: boolean;
  gate?: boolean;
}
const TENSORS: Record<string, TensorLayout> = {
  'qwen3-0.6b': { prefix: 'model.layers.', norm: 'head' },
  'qwen3-4b': { prefix: 'model.layers.', norm: 'head' },
  'qwen3-next-80b-a3b-instruct': { prefix: 'model.layers.', norm: 'head', gate: true },
  'qwen3.5-0.8b': { prefix: 'model.language_model.layers.', norm: 'head', gate: true },
  'gemma-2-2b-it': { prefix: 'model.layers.' },
  'gemma-3-1b-it': { prefix: 'model.layers.', norm: 'head' },
  // transformers 4's Gemma3ForConditionalGeneration wrote language_model.model.layers.…
  'gemma-3-4b-it': { prefix: 'language_model.model.layers.', norm: 'head' },
  'gemma-4-e2b-it': { prefix: 'model.language_model.layers.', norm: 'head' },
  'gpt-oss-20b': { prefix: 'model.layers.', bias: 'qkvo', sinks: true },
  'smollm3-3b': { prefix: 'model.layers.' },
  'phi-4-mini-instruct': { prefix: 'model.layers.', fused: true },
  'phi-3-mini-4k-instruct': { prefix: 'model.layers.', fused: true },
  'llama-3.2-1b': { prefix: 'model.layers.' },
  'mistral-7b-v0.1': { prefix: 'model.layers.' },
  'olmo-2-0425-1b': { prefix: 'model.layers.', norm: 'all' },
  'qwen2.5-0.5b': { prefix: 'model.layers.', bias: 'qkv' },
};

/** Features a layer of these models needs that this engine build may lack: the loader must refuse, naming it. */
const PENDING: Record<string, { feature: keyof EngineFeatures; text: string }[]> = {
  'qwen3-next-80b-a3b-instruct': [{ feature: 'outputGate', text: 'config.outputGate' }],
  'qwen3.5-0.8b': [{ feature: 'outputGate', text: 'config.outputGate' }],
  'gemma-4-e2b-it': [{ feature: 'vNorm', text: 'config.vNorm' }],
  'olmo-2-0425-1b': [{ feature: 'qkNormOverAll', text: "config.qkNorm.over 'all'" }],
};
const ALL_FEATURES: EngineFeatures = { qkNormOverAll: true, vNorm: true, keyIsValue: true, outputGate: true };
/** Build no layer with more float32 weights than this. */
const MAX_LAYER_BYTES = 70 * 2 ** 20;
/** Phi-4-mini's longrope needs it; the other ropes ignore it. */
const MAX_POSITIONS = 4096;

const names = readdirSync(dir)
  .filter((f) => f.endsWith('.json') && f !== 'expected.json')
  .map((f) => f.slice(0, -'.json'.length))
  .sort();

test('each fixture is a config.json that says where it comes from, and each has its card, tensor names and transformers expectations', () => {
  expect(names).toEqual(Object.keys(CARDS).sort());
  expect(Object.keys(expected.models).sort(), REGENERATE).toEqual(names);
  for (const n of names) {
    const c = config(n);
    expect(String(c._fixture_source), n).toMatch(/^(verbatim|reconstructed)/);
    expect(typeof c.model_type, n).toBe('string');
    expect(TENSORS[n], n).toBeDefined();
    expect(readFileSync(new URL(`${n}.json`, dir)).byteLength, `${n} stays small`).toBeLessThan(16 * 1024);
  }
});

describe.each(names)('%s', (name) => {
  const card = CARDS[name];
  const want = expected.models[name];

  test('hfModelLayers: the layer count, kinds, windows, NoPE layers, heads and head sizes of the model card', () => {
    const layers = hfModelLayers(config(name));
    expect(layers.length).toBe(card.layers);
    // and from the text too, as a user reading config.json passes it
    expect(hfModelLayers(readFileSync(new URL(`${name}.json`, dir), 'utf8'))).toEqual(layers);
    for (const l of layers) {
      const L = l.layer;
      const what = `${name} layer ${L}`;
      expect(l.kind, what).toBe(card.kind(L));
      expect(l.window, what).toBe(l.kind === 'sliding' ? card.window : undefined);
      expect(l.numHeads, what).toBe(card.H);
      expect(l.numKvHeads, what).toBe(card.G);
      expect(l.headDim, what).toBe(headDim(card, L));
      // A linear-attention layer (Qwen3-Next, Qwen3.5: a gated delta net) rotates nothing.
      expect(l.rope, `${what}: rotates`).toBe(l.kind !== 'linear' && !card.nope?.(L));
    }
  });

  test('the same model as transformers 5 saves it (v5/: rope_parameters, its defaults written out) gives the same layers', () => {
    expect(hfModelLayers(v5(name))).toEqual(hfModelLayers(config(name)));
    const a = parseHfConfig(config(name));
    const b = parseHfConfig(v5(name));
    for (let L = 0; L < a.numLayers; L++) {
      const [p, q] = [a.plan(L, MAX_POSITIONS, ALL_FEATURES), b.plan(L, MAX_POSITIONS, ALL_FEATURES)];
      const what = `${name} layer ${L}`;
      expect([q.E, q.H, q.G, q.Dh, q.scale, q.softcap, q.sinks, q.qkvBias, q.outBias, q.qkNorm, q.outputGate], what).toEqual([
        p.E,
        p.H,
        p.G,
        p.Dh,
        p.scale,
        p.softcap,
        p.sinks,
        p.qkvBias,
        p.outBias,
        p.qkNorm,
        p.outputGate,
      ]);
      expect(q.rope?.dim, what).toBe(p.rope?.dim);
      expect(q.rope?.attentionFactor, what).toBe(p.rope?.attentionFactor);
      expect(q.rope ? [...q.rope.invFreq] : null, what).toEqual(p.rope ? [...p.rope.invFreq] : null);
    }
  });

  test('hfModelLayers and the loader agree with transformers, layer by layer (heads, window, scale, softcap, sinks, rope)', () => {
    const parsed = parseHfConfig(config(name));
    expect(parsed.numLayers).toBe(want.numLayers);
    for (let L = 0; L < want.numLayers; L++) {
      const t = transformersLayer(want, L);
      const p = parsed.plan(L, MAX_POSITIONS, ALL_FEATURES);
      const what = `${name} layer ${L} (${want.attentionClass})`;
      if (t.type === 'linear_attention') {
        expect(p.layer.kind, what).toBe('linear');
        expect(p.refusal, what).toBeInstanceOf(UnsupportedError);
        expect(p.layer.unsupported, what).toContain('linear-attention');
        continue;
      }
      const e = t as ExpectedLayer;
      expect(p.E, what).toBe(want.hiddenSize);
      expect([p.H, p.Dh], what).toEqual([e.numHeads, e.headDim]);
      if (e.kvShared) {
        // Gemma 4's last num_kv_shared_layers layers have no k/v projections: refused, by name.
        expect(p.refusal, what).toBeInstanceOf(UnsupportedError);
        expect(p.layer.unsupported, what).toContain('KV-shared');
        continue;
      }
      expect(p.refusal, `${what}: ${p.layer.unsupported}`).toBeNull();
      expect(p.G, what).toBe(e.numKvHeads);
      expect((p.outputGate ? 2 : 1) * p.H * p.Dh, `${what}: q_proj rows`).toBe(e.qRows ?? p.H * p.Dh);
      expect(p.layer.window ?? null, `${what}: window`).toBe(e.slidingWindow);
      expect(p.layer.kind, what).toBe(e.slidingWindow === null ? 'full' : 'sliding');
      expect(p.scale ?? p.Dh ** -0.5, `${what}: scale`).toBeCloseTo(e.scaling, 12);
      expect(p.softcap ?? null, `${what}: softcap`).toBe(e.softcap);
      expect(p.sinks, `${what}: sinks`).toBe(e.sinks);
      expect(p.layer.rope, `${what}: rope`).toBe(e.useRope);
      if (!e.useRope) {
        expect(p.rope, what).toBeNull();
        continue;
      }
      const r = want.rope.all ?? want.rope[e.type];
      expect(r, `${what}: transformers' rotary for ${e.type}`).toBeDefined();
      const rope = p.rope!;
      expect(rope.invFreq.length, `${what}: invFreq length`).toBe(r.n);
      expect(rope.dim, `${what}: rotary dim`).toBe(2 * r.n);
      const rotated = [...rope.invFreq].filter((f) => f !== 0).length * 2;
      if (card.rotaryDim) expect(rotated, `${what}: rotated features`).toBe(card.rotaryDim(L));
      // transformers computes inv_freq in float32: agree to its rounding, first, last and all between.
      expect(rope.invFreq[0], `${what}: first θ`).toBeCloseTo(r.first, 12);
      expect(Math.abs(rope.invFreq[r.n - 1] - r.last), `${what}: last θ`).toBeLessThanOrEqual(1e-6 * r.last);
      for (const [i, f] of r.invFreq.entries()) expect(Math.abs(rope.invFreq[i] - f), `${what}: θ_${i}`).toBeLessThanOrEqual(1e-6 * f);
      expect(rope.attentionFactor, `${what}: attention factor`).toBeCloseTo(r.attentionScaling, 10);
    }
  });
});

// ---- random weights of one full and one sliding (or NoPE) layer of each, with the checkpoint's names ----

/** A deterministic uniform fill in [−a, a). */
function random(n: number, seed: number, a = 0.05, offset = 0): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = offset + a * (2 * (s / 2 ** 32) - 1);
  }
  return out;
}

/** The layer's attention tensors as the checkpoint names and shapes them (from the card, transformers' module and TENSORS). */
function layerTensors(name: string, L: number): { file: SafetensorsFile; bytes: number } | { bytes: number } {
  const card = CARDS[name];
  const t = transformersLayer(expected.models[name], L) as ExpectedLayer;
  const lay = TENSORS[name];
  const { E, H } = card;
  const Dh = headDim(card, L);
  const G = t.numKvHeads ?? card.G;
  const qRows = lay.gate ? 2 * H * Dh : H * Dh;
  const shapes: [string, number[]][] = [];
  if (lay.fused) shapes.push(['qkv_proj.weight', [(H + 2 * G) * Dh, E]]);
  else shapes.push(['q_proj.weight', [qRows, E]], ['k_proj.weight', [G * Dh, E]], ['v_proj.weight', [G * Dh, E]]);
  shapes.push(['o_proj.weight', [E, H * Dh]]);
  if (lay.bias) shapes.push(['q_proj.bias', [qRows]], ['k_proj.bias', [G * Dh]], ['v_proj.bias', [G * Dh]]);
  if (lay.bias === 'qkvo') shapes.push(['o_proj.bias', [E]]);
  if (lay.norm) shapes.push(['q_norm.weight', [lay.norm === 'all' ? H * Dh : Dh]], ['k_norm.weight', [lay.norm === 'all' ? G * Dh : Dh]]);
  if (lay.sinks) shapes.push(['sinks', [H]]);
  const bytes = 4 * shapes.reduce((s, [, shape]) => s + shape.reduce((a, b) => a * b, 1), 0);
  if (bytes > MAX_LAYER_BYTES) return { bytes };
  const file: SafetensorsFile = new Map();
  shapes.forEach(([suffix, shape], i) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = suffix.endsWith('norm.weight') ? random(n, 1000 + i, 0.1, 1) : random(n, 7 * L + i + 1);
    file.set(`${lay.prefix}${L}.self_attn.${suffix}`, { dtype: 'F32', shape, data });
  });
  return { file, bytes };
}

const engines = useEngines('cpu');
const SEQ = 3;

const builds = names.flatMap((n) => CARDS[n].build.map((L) => [n, L] as const));

describe.each(builds)('%s layer %i: attentionLayerFromHf on random weights of the checkpoint’s names and shapes', (name, L) => {
  test('loads (or is refused, naming what this build lacks) and runs 3 tokens on the cpu engine', async () => {
    const cfg = config(name);
    const built = layerTensors(name, L);
    if (!('file' in built)) {
      console.info(`hf-configs: ${name} layer ${L} not built (${(built.bytes / 2 ** 20).toFixed(0)} MB of float32 weights); its config is checked above`);
      return;
    }
    const { file } = built;
    const lacking = (PENDING[name] ?? []).filter((f) => !ENGINE_FEATURES[f.feature]);
    let layer: HfAttentionLayer;
    if (lacking.length) {
      const err = await attentionLayerFromHf(cfg, file, { layer: L, maxPositions: MAX_POSITIONS }).catch((e: unknown) => e);
      expect(err, `${name} layer ${L} is refused while the engine lacks ${lacking.map((f) => f.feature).join(', ')}`).toBeInstanceOf(UnsupportedError);
      for (const f of lacking) expect((err as Error).message).toContain(f.text);
      // The layer as the loader builds it once those features are in (config and state_dict only).
      layer = await loadHfLayer(cfg, file, { layer: L, maxPositions: MAX_POSITIONS }, ALL_FEATURES);
      checkLayer(name, L, layer);
      sameLayer(layer, await loadHfLayer(v5(name), file, { layer: L, maxPositions: MAX_POSITIONS }, ALL_FEATURES), `${name} layer ${L} from v5/`);
      return;
    }
    layer = await attentionLayerFromHf(cfg, file, { layer: L, maxPositions: MAX_POSITIONS });
    checkLayer(name, L, layer);
    sameLayer(layer, await attentionLayerFromHf(v5(name), file, { layer: L, maxPositions: MAX_POSITIONS }), `${name} layer ${L} from v5/`);
    const E = CARDS[name].E;
    const x = random(SEQ * E, 99 + L, 1);
    const mha = engines.cpu.createMultiHeadAttention(layer.config, layer.stateDict);
    try {
      const { output } = await mha.forward(x, { batchSize: 1, seqLen: SEQ, ...layer.forward });
      expect(output.length).toBe(SEQ * E);
      expect(
        output.every((v) => Number.isFinite(v)),
        'finite',
      ).toBe(true);
      expect(
        output.some((v) => v !== 0),
        'not all zero',
      ).toBe(true);
    } finally {
      mha.dispose();
    }
  });
});

/** The same layer loaded from two spellings of its config: the same config, state_dict and forward options. */
function sameLayer(a: HfAttentionLayer, b: HfAttentionLayer, what: string): void {
  const plain = (l: HfAttentionLayer) => ({
    config: { ...l.config, rotary: l.config.rotary && { ...l.config.rotary, invFreq: [...(l.config.rotary.invFreq ?? [])] } },
    forward: { ...l.forward, sinks: l.forward.sinks && [...l.forward.sinks] },
    stateDict: Object.keys(l.stateDict).sort(),
    layer: l.layer,
  });
  expect(plain(b), what).toEqual(plain(a));
}

/** The loaded layer's config, state_dict and forward options against the card and transformers. */
function checkLayer(name: string, L: number, l: HfAttentionLayer): void {
  const card = CARDS[name];
  const t = transformersLayer(expected.models[name], L) as ExpectedLayer;
  const Dh = headDim(card, L);
  const what = `${name} layer ${L}`;
  expect(l.config.embedDim, what).toBe(card.E);
  expect(l.config.numHeads, what).toBe(card.H);
  expect(l.config.numKvHeads ?? card.H, what).toBe(t.numKvHeads);
  expect(l.config.headDim ?? card.E / card.H, what).toBe(Dh);
  expect(l.forward.isCausal).toBe(true);
  expect(l.forward.window ?? null, `${what}: window`).toBe(t.slidingWindow);
  expect(l.forward.scale ?? Dh ** -0.5, `${what}: scale`).toBeCloseTo(t.scaling, 12);
  expect(l.forward.softcap ?? null, `${what}: softcap`).toBe(t.softcap);
  expect(l.forward.sinks !== undefined, `${what}: sinks`).toBe(t.sinks);
  expect(l.config.rotary !== undefined, `${what}: rotary`).toBe(t.useRope);
  const lay = TENSORS[name];
  expect(l.config.qkNorm !== undefined, `${what}: QK-norm`).toBe(lay.norm !== undefined);
  if (lay.norm === 'all') expect(l.config.qkNorm?.over).toBe('all');
  if (lay.gate) {
    expect(l.config.outputGate).toBe(true);
    expect(l.stateDict.gate_proj_weight.length).toBe(card.H * Dh * card.E);
  }
  expect(l.stateDict['out_proj.weight'].length).toBe(card.E * card.H * Dh);
}

test('Phi-4-mini (longrope) without options.maxPositions: InvalidArgumentError naming it, as documented', async () => {
  const built = layerTensors('qwen2.5-0.5b', 0);
  expect('file' in built).toBe(true);
  // The config is checked before any weight is looked at, so any file does for this refusal.
  const err = await attentionLayerFromHf(config('phi-4-mini-instruct'), (built as { file: SafetensorsFile }).file, { layer: 0 }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(InvalidArgumentError);
  expect((err as Error).message).toContain('options.maxPositions');
  expect((err as Error).message).toContain('4096');
});
