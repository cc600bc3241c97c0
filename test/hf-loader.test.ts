// attentionLayerFromHf / hfModelLayers / openSafetensors: config.json of every family in both spellings,
// rotary inverse frequencies against transformers' own rotary classes (test/fixtures/hf-rope/cases.json,
// scripts/make_hf_rope_fixtures.py), state dicts, bad input, shards and lazy reading.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, MissingWeightError, ShapeMismatchError, UnsupportedError } from '../src/errors.ts';
import { ENGINE_FEATURES } from '../src/weights/hf-config.ts';
import { type HfLayerOptions, type HfWeights, attentionLayerFromHf, hfModelLayers, loadHfLayer } from '../src/weights/hf.ts';
import { openSafetensors } from '../src/weights/safetensors-lazy.ts';
import { parseSafetensors } from '../src/weights/safetensors.ts';
import { writeSafetensors } from './helpers/safetensors.ts';

type Json = Record<string, unknown>;

/** The loader as it builds once the engine has every feature of issue 39 (config and state_dict only). */
const ALL = { qkNormOverAll: true, vNorm: true, keyIsValue: true, outputGate: true };
const loadAll = (config: unknown, weights: HfWeights, options: HfLayerOptions) => loadHfLayer(config, weights, options, ALL);
const fixtures = JSON.parse(readFileSync(new URL('./fixtures/hf-rope/cases.json', import.meta.url), 'utf8')) as {
  cases: { name: string; config: Json; layer_types: string[]; rope: Record<string, { inv_freq: number[]; attention_scaling: number }> }[];
};

let seed = 1;
function rand(n: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    seed = (seed * 16807) % 2147483647;
    out[i] = (seed / 2147483647) * 2 - 1;
  }
  return out;
}

/** The tensors save_pretrained writes for layer L's attention, sized from the loader's own layer list. */
function layerTensors(config: Json, L: number, prefix = 'model.layers.'): Record<string, { shape: number[]; data: Float32Array }> {
  const text = (config.text_config as Json | undefined) ? { ...(config.text_config as Json), model_type: `${config.model_type}_text` } : config;
  const info = hfModelLayers(config)[L];
  const mt = String(text.model_type);
  const E = Number(text.hidden_size);
  const { numHeads: H, numKvHeads: G, headDim: Dh } = info;
  const p = `${prefix}${L}.self_attn.`;
  const t: Record<string, { shape: number[]; data: Float32Array }> = {};
  const put = (name: string, shape: number[]) => {
    t[p + name] = { shape, data: rand(shape.reduce((a, b) => a * b, 1)) };
  };
  const gated = mt.startsWith('qwen3_next') || mt.startsWith('qwen3_5');
  const bias = mt === 'qwen2' || (text.attention_bias ?? mt === 'gpt_oss') === true;
  const kEqV = mt.startsWith('gemma4') && text.attention_k_eq_v === true && info.kind === 'full';
  if (mt === 'phi3') put('qkv_proj.weight', [(H + 2 * G) * Dh, E]);
  else {
    put('q_proj.weight', [(gated ? 2 : 1) * H * Dh, E]);
    put('k_proj.weight', [G * Dh, E]);
    if (!kEqV) put('v_proj.weight', [G * Dh, E]);
    if (bias) {
      put('q_proj.bias', [(gated ? 2 : 1) * H * Dh]);
      put('k_proj.bias', [G * Dh]);
      if (!kEqV) put('v_proj.bias', [G * Dh]);
    }
  }
  put('o_proj.weight', [E, H * Dh]);
  if (bias && mt !== 'qwen2') put('o_proj.bias', [E]);
  if (mt.startsWith('olmo')) {
    put('q_norm.weight', [H * Dh]);
    put('k_norm.weight', [G * Dh]);
  } else if (['qwen3', 'gemma3_text', 'gemma3', 'gemma4_text', 'gemma4'].includes(mt) || gated) {
    put('q_norm.weight', [Dh]);
    put('k_norm.weight', [Dh]);
  }
  if (mt === 'gpt_oss') put('sinks', [H]);
  return t;
}

const file = (config: Json, L: number, prefix?: string) => parseSafetensors(writeSafetensors(layerTensors(config, L, prefix)));

describe('attentionLayerFromHf: rotary against transformers (every rope type, both config spellings)', () => {
  for (const c of fixtures.cases) {
    it(c.name, async () => {
      const layers = hfModelLayers(c.config);
      let checked = 0;
      for (let L = 0; L < layers.length; L++) {
        if (layers[L].kind === 'linear') continue;
        const ref = c.rope.all ?? c.rope[c.layer_types[L]];
        const got = await loadAll(c.config, file(c.config, L), { layer: L, maxPositions: 100 });
        if (!layers[L].rope) {
          expect(got.config.rotary).toBeUndefined();
          continue;
        }
        const r = got.config.rotary!;
        expect(r.interleaved).toBe(false);
        expect(r.invFreq!.length).toBe(ref.inv_freq.length);
        expect(r.dim).toBe(c.config.model_type === 'gemma4_text' ? got.layer.headDim : 2 * ref.inv_freq.length);
        // float32 as torch computes it: within an ulp or so of transformers' inv_freq.
        const worst = Math.max(...ref.inv_freq.map((v, i) => Math.abs(r.invFreq![i] - v) / (Math.abs(v) || 1)));
        expect(worst).toBeLessThanOrEqual(2.5e-7);
        expect(r.attentionFactor).toBeCloseTo(ref.attention_scaling, 6);
        checked++;
      }
      expect(checked).toBeGreaterThan(0);
    });
  }
});

const base = { hidden_size: 64, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 8, vocab_size: 32, intermediate_size: 32 };

describe('hfModelLayers: kinds, windows, NoPE, refusals', () => {
  it('SmolLM3: every 4th layer is NoPE (no_rope_layer_interval), or as no_rope_layers says', () => {
    const layers = hfModelLayers({ model_type: 'smollm3', ...base });
    expect(layers.map((l) => l.rope)).toEqual([true, true, true, false, true, true, true, false]);
    const given = hfModelLayers({ model_type: 'smollm3', ...base, no_rope_layers: [0, 1, 1, 1, 1, 1, 1, 0] });
    expect(given.map((l) => l.rope)).toEqual([false, true, true, true, true, true, true, false]);
  });
  it('Gemma 2 / gpt-oss alternate sliding and full; Gemma 3 slides on 5 of 6', () => {
    const g2 = hfModelLayers({ model_type: 'gemma2', ...base, head_dim: 16, sliding_window: 7 });
    expect(g2.map((l) => l.kind)).toEqual(['sliding', 'full', 'sliding', 'full', 'sliding', 'full', 'sliding', 'full']);
    expect(g2[0].window).toBe(7);
    const oss = hfModelLayers({ model_type: 'gpt_oss', ...base, head_dim: 16 });
    expect(oss[0]).toMatchObject({ kind: 'sliding', window: 128, headDim: 16 });
    const g3 = hfModelLayers({ model_type: 'gemma3_text', ...base, head_dim: 16 });
    expect(g3.map((l) => l.kind)).toEqual(['sliding', 'sliding', 'sliding', 'sliding', 'sliding', 'full', 'sliding', 'sliding']);
  });
  it('Qwen3-Next / Qwen3.5: linear-attention layers are listed and refused', () => {
    const layers = hfModelLayers({ model_type: 'qwen3_5', text_config: { ...base, head_dim: 16 } });
    expect(layers.map((l) => l.kind)).toEqual(['linear', 'linear', 'linear', 'full', 'linear', 'linear', 'linear', 'full']);
    expect(layers[0].unsupported).toMatch(/linear-attention/);
    expect(layers[3].unsupported === null).toBe(ENGINE_FEATURES.outputGate);
  });
  it('Gemma 4: the last layer is full, full layers take global_head_dim, KV-shared layers are refused', () => {
    const layers = hfModelLayers({
      model_type: 'gemma4_text',
      ...base,
      head_dim: 16,
      global_head_dim: 32,
      num_kv_shared_layers: 2,
      layer_types: Array(8).fill('sliding_attention'),
    });
    expect(layers[7].kind).toBe('full');
    expect(layers[7].headDim).toBe(32);
    expect(layers[6].unsupported).toMatch(/KV-shared/);
    expect(layers[5]).toMatchObject({ kind: 'sliding', window: 512, headDim: 16 });
  });
  it('a transformers 4 multimodal config whose text_config leaves the defaults out (Gemma 3 4B) takes the family defaults', () => {
    const layers = hfModelLayers({
      model_type: 'gemma3',
      text_config: {
        hidden_size: 2560,
        intermediate_size: 10240,
        model_type: 'gemma3_text',
        num_hidden_layers: 34,
        rope_scaling: { factor: 8.0, rope_type: 'linear' },
        sliding_window: 1024,
      },
    });
    expect(layers.length).toBe(34);
    expect(layers[0]).toMatchObject({ kind: 'sliding', window: 1024, numHeads: 8, numKvHeads: 4, headDim: 256, rope: true, unsupported: null });
    expect(layers[5]).toMatchObject({ kind: 'full', headDim: 256 });
  });
  it('Qwen2 windows only with use_sliding_window, from max_window_layers', () => {
    expect(hfModelLayers({ model_type: 'qwen2', ...base, sliding_window: 4 }).every((l) => l.kind === 'full')).toBe(true);
    const w = hfModelLayers({ model_type: 'qwen2', ...base, use_sliding_window: true, sliding_window: 4, max_window_layers: 6 });
    expect(w.map((l) => l.kind)).toEqual(['full', 'full', 'full', 'full', 'full', 'full', 'sliding', 'sliding']);
  });
});

describe('attentionLayerFromHf: state dicts and forward options per family', () => {
  it('llama: q/k/v/o as given, no bias, GQA, causal', async () => {
    const config = { model_type: 'llama', ...base };
    const tensors = layerTensors(config, 2);
    const got = await attentionLayerFromHf(JSON.stringify(config), parseSafetensors(writeSafetensors(tensors)), { layer: 2 });
    expect(got.config).toMatchObject({ embedDim: 64, numHeads: 4, numKvHeads: 2, bias: false });
    expect(got.config.headDim).toBeUndefined();
    expect(got.stateDict.q_proj_weight).toEqual(tensors['model.layers.2.self_attn.q_proj.weight'].data);
    expect(got.stateDict['out_proj.weight']).toEqual(tensors['model.layers.2.self_attn.o_proj.weight'].data);
    expect(got.forward).toEqual({ isCausal: true });
    expect(got.architecture).toBe('llama');
  });
  it('qwen2: q/k/v biases and a zero output bias', async () => {
    const config = { model_type: 'qwen2', ...base };
    const tensors = layerTensors(config, 0);
    const got = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(tensors)), { layer: 0 });
    const b = got.stateDict.in_proj_bias;
    expect(b.length).toBe(64 + 2 * 32);
    expect(b.subarray(64, 96)).toEqual(tensors['model.layers.0.self_attn.k_proj.bias'].data);
    expect(got.stateDict['out_proj.bias']).toEqual(new Float32Array(64));
  });
  it('qwen3: head_dim ≠ E/H gives config.headDim, per-head QK-norm weights as given', async () => {
    const config = { model_type: 'qwen3', ...base, head_dim: 32 };
    const tensors = layerTensors(config, 1);
    const got = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(tensors)), { layer: 1 });
    expect(got.config.headDim).toBe(32);
    expect(got.config.qkNorm!.query).toEqual(tensors['model.layers.1.self_attn.q_norm.weight'].data);
    expect(got.config.qkNorm!.over).toBeUndefined();
  });
  it('gemma3: scale query_pre_attn_scalar^-0.5, (1 + w) norm weights, window on sliding layers, no softcap', async () => {
    const config = { model_type: 'gemma3_text', ...base, head_dim: 16, query_pre_attn_scalar: 64, sliding_window: 5, attn_logit_softcapping: 30 };
    const tensors = layerTensors(config, 0);
    const got = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(tensors)), { layer: 0 });
    expect(got.forward).toEqual({ isCausal: true, window: 5, scale: 64 ** -0.5 });
    const w = tensors['model.layers.0.self_attn.q_norm.weight'].data;
    expect(got.config.qkNorm!.query).toEqual(w.map((v) => v + 1));
  });
  it('gemma3 multimodal checkpoint: text_config and model.language_model.layers (t5) or language_model.model.layers (t4)', async () => {
    const config = { model_type: 'gemma3', text_config: { ...base, head_dim: 16 } };
    for (const prefix of ['model.language_model.layers.', 'language_model.model.layers.']) {
      const got = await attentionLayerFromHf(config, file(config, 5, prefix), { layer: 5 });
      expect(got.layer.kind).toBe('full');
      expect(got.architecture).toBe('gemma3_text');
    }
  });
  it('gemma2: softcap 50 by default and scale 256^-0.5', async () => {
    const config = { model_type: 'gemma2', ...base, head_dim: 16 };
    const got = await attentionLayerFromHf(config, file(config, 1), { layer: 1 });
    expect(got.forward).toEqual({ isCausal: true, scale: 1 / 16, softcap: 50 });
  });
  it('gemma4: scale 1, vNorm, keyIsValue on full layers with attention_k_eq_v (no v weights), proportional rope', async () => {
    const config = { model_type: 'gemma4_text', ...base, head_dim: 16, global_head_dim: 32, attention_k_eq_v: true, num_global_key_value_heads: 1 };
    const got = await loadAll(config, file(config, 5), { layer: 5 });
    expect(got.forward.scale).toBe(1);
    expect(got.config).toMatchObject({ headDim: 32, numKvHeads: 1, kEqV: true, vNorm: { eps: 1e-6 } });
    expect(got.stateDict.v_proj_weight).toBeUndefined();
    expect(got.config.rotary!.dim).toBe(32);
    expect([...got.config.rotary!.invFreq!].filter((x) => x === 0).length).toBe(12); // 16 pairs, 0.25 rotated
    const sliding = await loadAll(config, file(config, 0), { layer: 0 });
    expect(sliding.config.kEqV).toBeUndefined();
    expect(sliding.forward.window).toBe(512);
  });
  it('qwen3_next: q_proj rows [query_h, gate_h] split into q_proj_weight and gate_proj_weight; (1 + w) norms; partial rotary', async () => {
    const config = { model_type: 'qwen3_next', ...base, head_dim: 16 };
    const tensors = layerTensors(config, 3);
    const got = await loadAll(config, parseSafetensors(writeSafetensors(tensors)), { layer: 3 });
    const q = tensors['model.layers.3.self_attn.q_proj.weight'].data;
    const E = 64;
    const Dh = 16;
    // head 1's query rows are rows 32…47 of q_proj, its gate rows 48…63.
    expect(got.stateDict.q_proj_weight.subarray(Dh * E, 2 * Dh * E)).toEqual(q.subarray(2 * Dh * E, 3 * Dh * E));
    expect(got.stateDict.gate_proj_weight.subarray(Dh * E, 2 * Dh * E)).toEqual(q.subarray(3 * Dh * E, 4 * Dh * E));
    expect(got.config.outputGate).toBe(true);
    expect(got.config.rotary!.dim).toBe(4);
    expect(got.config.qkNorm!.key).toEqual(tensors['model.layers.3.self_attn.k_norm.weight'].data.map((v) => v + 1));
    await expect(loadAll(config, parseSafetensors(writeSafetensors(tensors)), { layer: 0 })).rejects.toThrow(UnsupportedError);
  });
  it('qwen3_next with attention_bias: the q_proj bias splits like its rows (query part → in_proj_bias, gate part → gate_proj_bias)', async () => {
    const config = { model_type: 'qwen3_next', ...base, head_dim: 16, attention_bias: true };
    const tensors = layerTensors(config, 3);
    const got = await loadAll(config, parseSafetensors(writeSafetensors(tensors)), { layer: 3 });
    const qb = tensors['model.layers.3.self_attn.q_proj.bias'].data;
    // head 2: query bias entries 64…79 of q_proj.bias, gate 80…95.
    expect(got.stateDict.in_proj_bias.subarray(32, 48)).toEqual(qb.subarray(64, 80));
    expect(got.stateDict.gate_proj_bias.subarray(32, 48)).toEqual(qb.subarray(80, 96));
    expect(got.stateDict.in_proj_bias.subarray(64, 96)).toEqual(tensors['model.layers.3.self_attn.k_proj.bias'].data);
    expect(got.stateDict['out_proj.bias']).toEqual(tensors['model.layers.3.self_attn.o_proj.bias'].data);
  });
  it('gpt_oss: biases, sinks, window on even layers, yarn with its attention factor', async () => {
    const config = { model_type: 'gpt_oss', ...base, head_dim: 16 };
    const tensors = layerTensors(config, 0);
    const got = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(tensors)), { layer: 0 });
    expect(got.forward.sinks).toEqual(tensors['model.layers.0.self_attn.sinks'].data);
    expect(got.forward.window).toBe(128);
    expect(got.config.bias).toBe(true);
    expect(got.config.rotary!.attentionFactor).toBeCloseTo(0.1 * Math.log(32) + 1, 12);
  });
  it('phi3: fused qkv_proj → in_proj_weight, partial rotary', async () => {
    const config = { model_type: 'phi3', ...base, partial_rotary_factor: 0.5 };
    const tensors = layerTensors(config, 0);
    const got = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(tensors)), { layer: 0 });
    expect(got.stateDict.in_proj_weight).toEqual(tensors['model.layers.0.self_attn.qkv_proj.weight'].data);
    expect(got.config.rotary!.dim).toBe(8);
  });
  it('olmo2: QK-norm over the whole projection (qkNorm.over "all", [H·Dh] and [G·Dh])', async () => {
    const config = { model_type: 'olmo2', ...base };
    const got = await loadAll(config, file(config, 0), { layer: 0 });
    expect(got.config.qkNorm!.over).toBe('all');
    expect(got.config.qkNorm!.query.length).toBe(64);
    expect(got.config.qkNorm!.key.length).toBe(32);
    expect(got.config.qkNorm!.eps).toBe(1e-5);
  });
  it('a layer needing an engine feature this build lacks is refused by attentionLayerFromHf, naming it', async () => {
    const cases: [Json, number, keyof typeof ALL, RegExp][] = [
      [{ model_type: 'olmo2', ...base }, 0, 'qkNormOverAll', /qkNorm\.over/],
      [{ model_type: 'gemma4_text', ...base, head_dim: 16 }, 0, 'vNorm', /vNorm/],
      [{ model_type: 'qwen3_next', ...base, head_dim: 16 }, 3, 'outputGate', /outputGate/],
    ];
    for (const [config, L, feature, name] of cases) {
      const load = attentionLayerFromHf(config, file(config, L), { layer: L });
      if (ENGINE_FEATURES[feature]) await expect(load).resolves.toBeDefined();
      else {
        const err = await load.catch((e) => e);
        expect(err).toBeInstanceOf(UnsupportedError);
        expect(err.message).toMatch(name);
        expect(err.message).toContain(`layer ${L} of ${config.model_type}`);
        expect(hfModelLayers(config)[L].unsupported).toMatch(name);
      }
    }
  });
  it('smollm3: NoPE layers have no rotary', async () => {
    const config = { model_type: 'smollm3', ...base };
    expect((await attentionLayerFromHf(config, file(config, 3), { layer: 3 })).config.rotary).toBeUndefined();
    expect((await attentionLayerFromHf(config, file(config, 2), { layer: 2 })).config.rotary).toBeDefined();
  });
  it('BF16 and F16 tensors are read (widened)', async () => {
    const config = { model_type: 'llama', ...base, num_hidden_layers: 1 };
    const t = layerTensors(config, 0);
    // A BF16 copy of the file: keep each float's top 16 bits.
    const header: Json = {};
    let off = 0;
    const parts: Uint8Array[] = [];
    for (const [name, { shape, data }] of Object.entries(t)) {
      const u32 = new Uint32Array(data.buffer.slice(0));
      const half = Uint16Array.from(u32, (x) => x >>> 16);
      header[name] = { dtype: 'BF16', shape, data_offsets: [off, off + half.byteLength] };
      off += half.byteLength;
      parts.push(new Uint8Array(half.buffer));
    }
    const h = new TextEncoder().encode(JSON.stringify(header).padEnd(Math.ceil(JSON.stringify(header).length / 8) * 8));
    const bytes = new Uint8Array(8 + h.length + off);
    new DataView(bytes.buffer).setBigUint64(0, BigInt(h.length), true);
    bytes.set(h, 8);
    let at = 8 + h.length;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    const got = await attentionLayerFromHf(config, parseSafetensors(bytes), { layer: 0 });
    const q = t['model.layers.0.self_attn.q_proj.weight'].data;
    const worst = Math.max(...Array.from(got.stateDict.q_proj_weight, (v, i) => Math.abs(v - q[i]) / Math.abs(q[i])));
    expect(worst).toBeLessThan(1 / 128); // bfloat16 keeps 8 bits of mantissa
    expect(worst).toBeGreaterThan(0);
  });
});

describe('attentionLayerFromHf: bad input', () => {
  const config = { model_type: 'llama', ...base };
  it('an unknown model_type lists the families read', async () => {
    await expect(attentionLayerFromHf({ ...config, model_type: 'mamba' }, file(config, 0), { layer: 0 })).rejects.toThrow(
      /UnsupportedError|one of the families.*gemma3.*olmo2/s,
    );
    await expect(attentionLayerFromHf({ ...config, model_type: 'mamba' }, file(config, 0), { layer: 0 })).rejects.toBeInstanceOf(UnsupportedError);
  });
  it('a layer past num_hidden_layers', async () => {
    await expect(attentionLayerFromHf(config, file(config, 0), { layer: 8 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attentionLayerFromHf(config, file(config, 0), { layer: -1 })).rejects.toThrow(/0 … 7/);
  });
  it('a missing tensor names it', async () => {
    const t = layerTensors(config, 0);
    delete t['model.layers.0.self_attn.k_proj.weight'];
    const err = await attentionLayerFromHf(config, parseSafetensors(writeSafetensors(t)), { layer: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(MissingWeightError);
    expect(err.message).toContain('model.layers.0.self_attn.k_proj.weight');
  });
  it('a shape that does not fit the config gives expected and given shapes', async () => {
    const t = layerTensors(config, 0);
    const err = await attentionLayerFromHf({ ...config, head_dim: 8 }, parseSafetensors(writeSafetensors(t)), { layer: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(ShapeMismatchError);
    expect(err.message).toMatch(/\[32, 64\].*\[64, 64\]/s);
  });
  it('a missing bias of attention_bias, a missing layer in the shards', async () => {
    await expect(attentionLayerFromHf({ ...config, attention_bias: true }, file(config, 0), { layer: 0 })).rejects.toThrow(/q_proj\.bias/);
    await expect(attentionLayerFromHf(config, file(config, 0), { layer: 1 })).rejects.toBeInstanceOf(MissingWeightError);
  });
  it('dynamic and longrope need maxPositions within their threshold; other rope types are refused by name', async () => {
    const dyn = { ...config, max_position_embeddings: 64, rope_scaling: { type: 'dynamic', factor: 2 } };
    await expect(attentionLayerFromHf(dyn, file(dyn, 0), { layer: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attentionLayerFromHf(dyn, file(dyn, 0), { layer: 0, maxPositions: 65 })).rejects.toThrow(/dynamic/);
    expect((await attentionLayerFromHf(dyn, file(dyn, 0), { layer: 0, maxPositions: 64 })).config.rotary!.invFreq![0]).toBe(1);
    const odd = { ...config, rope_scaling: { rope_type: 'ntk-by-parts', factor: 2 } };
    const err = await attentionLayerFromHf(odd, file(config, 0), { layer: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(UnsupportedError);
    expect(err.message).toContain('ntk-by-parts');
  });
  it('a layer type the family has no module for is refused', async () => {
    const config = { model_type: 'gemma2', ...base, head_dim: 16, layer_types: ['chunked_attention', ...Array(7).fill('full_attention')] };
    const err = await attentionLayerFromHf(config, file(config, 1), { layer: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(UnsupportedError);
    expect(err.message).toContain('chunked_attention');
    expect(hfModelLayers(config)[1].unsupported).toBeNull();
  });
  it('a partial_rotary_factor on a family whose rope rotates whole heads is refused', async () => {
    await expect(attentionLayerFromHf({ ...config, partial_rotary_factor: 0.5 }, file(config, 0), { layer: 0 })).rejects.toBeInstanceOf(UnsupportedError);
  });
  it('weights that are not safetensors files', async () => {
    await expect(attentionLayerFromHf(config, {} as never, { layer: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attentionLayerFromHf('{not json', file(config, 0), { layer: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('shards and lazy reading', () => {
  const config = { model_type: 'qwen3', ...base, head_dim: 16, num_hidden_layers: 4 };
  const shards = [0, 1, 2, 3].map((L) => {
    const t = layerTensors(config, L);
    // Some padding weights that are not attention (an MLP) make each shard larger than its attention.
    t[`model.layers.${L}.mlp.down_proj.weight`] = { shape: [64, 512], data: rand(64 * 512) };
    return writeSafetensors(t);
  });
  it('finds each tensor in whichever shard has it', async () => {
    const mixed = [...shards.map((s) => parseSafetensors(s))].reverse();
    const got = await attentionLayerFromHf(config, mixed, { layer: 2 });
    expect(got.stateDict.k_proj_weight.length).toBe(32 * 64);
  });
  it('openSafetensors reads the headers and only the layer’s tensors', async () => {
    const lazy = await Promise.all(shards.map((s) => openSafetensors(s)));
    const headers = lazy.reduce((a, f) => a + f.bytesRead, 0);
    const got = await attentionLayerFromHf(config, lazy, { layer: 1 });
    const read = lazy.reduce((a, f) => a + f.bytesRead, 0) - headers;
    const attention = 4 * (64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 16 + 16);
    expect(read).toBe(attention);
    expect(lazy.map((f) => f.bytesRead > (f === lazy[1] ? attention : 0) + 0)).toEqual([true, true, true, true]);
    expect(got.stateDict.q_proj_weight).toEqual(parseSafetensors(shards[1]).get('model.layers.1.self_attn.q_proj.weight')!.data);
    const total = shards.reduce((a, s) => a + s.byteLength, 0);
    console.log(`lazy: ${headers} header bytes + ${read} tensor bytes read of ${total} (layer 1 of 4 shards)`);
    expect(headers + read).toBeLessThan(total / 4);
  });
  it('a refused load reads no tensor bytes (every check precedes every read)', async () => {
    const lazy = await Promise.all(shards.map((s) => openSafetensors(s)));
    const before = lazy.map((f) => f.bytesRead);
    await expect(attentionLayerFromHf({ ...config, head_dim: 8 }, lazy, { layer: 1 })).rejects.toBeInstanceOf(ShapeMismatchError);
    await expect(attentionLayerFromHf({ ...config, attention_bias: true }, lazy, { layer: 1 })).rejects.toBeInstanceOf(MissingWeightError);
    expect(lazy.map((f) => f.bytesRead)).toEqual(before);
  });
  it('openSafetensors refuses a damaged file by WeightFileError, and a tensor it lacks by MissingWeightError', async () => {
    await expect(openSafetensors(shards[0].subarray(0, 4))).rejects.toMatchObject({ name: 'WeightFileError', problem: 'truncated' });
    await expect(openSafetensors(shards[0].subarray(0, shards[0].byteLength - 1))).rejects.toMatchObject({ name: 'WeightFileError', problem: 'truncated' });
    const broken = shards[0].slice();
    broken[9] = 0x21; // the header's JSON no longer parses
    await expect(openSafetensors(broken)).rejects.toMatchObject({ name: 'WeightFileError', problem: 'header' });
    await expect((await openSafetensors(shards[0])).tensor('nope')).rejects.toBeInstanceOf(MissingWeightError);
  });
  it('openSafetensors reads a Blob and a Node path by offsets', async () => {
    const blob = await openSafetensors(new Blob([new Uint8Array(shards[0])]));
    const got = await attentionLayerFromHf(config, blob, { layer: 0 });
    expect(got.stateDict.k_proj_weight.length).toBe(32 * 64);
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const path = `${mkdtempSync(`${tmpdir()}/hf-`)}/model.safetensors`;
    writeFileSync(path, shards[0]);
    const fromPath = await openSafetensors(path);
    await attentionLayerFromHf(config, fromPath, { layer: 0 });
    expect(fromPath.bytesRead).toBeLessThan(shards[0].byteLength / 2);
  });
});
