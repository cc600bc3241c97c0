// One attention layer of a Hugging Face checkpoint (config.json + .safetensors, as save_pretrained writes
// them) as this engine's config, state_dict and forward options; and the list of a model's layers.
//
//   {P}{L}.self_attn.q_proj.weight [H·Dh, E]   → q_proj_weight     (Qwen3-Next/3.5: [2·H·Dh, E], rows
//                                                                    [query_h, gate_h] per head, split into
//                                                                    q_proj_weight and gate_proj_weight [H·Dh, E])
//   {P}{L}.self_attn.k_proj.weight [G·Dh, E]   → k_proj_weight
//   {P}{L}.self_attn.v_proj.weight [G·Dh, E]   → v_proj_weight     (none on Gemma 4's K = V layers)
//   {P}{L}.self_attn.qkv_proj.weight           → in_proj_weight    (Phi-3)
//   {P}{L}.self_attn.{q,k,v}_proj.bias         → in_proj_bias [(H + 2G)·Dh]   (gate rows: gate_proj_bias)
//   {P}{L}.self_attn.o_proj.weight [E, H·Dh]   → out_proj.weight;  .bias → out_proj.bias (zeros if the family has none)
//   {P}{L}.self_attn.{q,k}_norm.weight         → config.qkNorm (+1 where the family's norm multiplies by 1 + w)
//   {P}{L}.self_attn.sinks [H]                 → forward.sinks (gpt-oss)
//
// P is model.layers. (causal LMs), model.language_model.layers. (transformers 5 multimodal checkpoints) or
// language_model.model.layers. (transformers 4 ones). Every family rule is in ./hf-config.ts (sizes,
// windows, scale, softcap, norms, NoPE, refusals) and ./hf-rope.ts (rotary as inverse frequencies).
//
// The engine fields of issue 39 this targets, as the loader means them (checked in numbers against each
// family's own module): qkNorm.over 'all' — one RMS norm over the whole projection (weights [H·Dh],
// [G·Dh]); vNorm { eps } — a weightless RMS norm of each V head; kEqV — no v weights, V is the k
// projection's output before the key norm and rotary (then vNorm); outputGate — out = W_O·(attention ⊙
// sigmoid(x·gate_proj_weightᵀ + gate_proj_bias)). While createMultiHeadAttention lacks one of these
// (src/option-keys.ts), a layer needing it is refused with UnsupportedError.
//
// Refused, by name: Qwen3-Next/3.5 linear-attention layers; Gemma 4 KV-shared layers; bidirectional Gemma;
// rope types other than default, linear, llama3, yarn, proportional, and dynamic / longrope beyond their
// thresholds (options.maxPositions); partial_rotary_factor where the family's rope ignores it; a layer
// type the family has no module for; K = V with biases; quantized tensors (FP8, MXFP4, …).

import { MissingWeightError, ShapeMismatchError, InvalidArgumentError, UnsupportedError } from '../errors.ts';
import type { MultiHeadAttentionConfig } from '../types.ts';
import { describe } from '../validate.ts';
import { ENGINE_FEATURES, type EngineFeatures, WHERE, parseHfConfig } from './hf-config.ts';
import type { ModelLayer } from './model-layers.ts';
import type { SafetensorsFile } from './safetensors.ts';
import { type LazySafetensorsFile, isLazySafetensors } from './safetensors-lazy.ts';

export { HF_FAMILIES } from './hf-config.ts';

/** What attentionLayerFromHf reads weights from: parsed files, lazy ones (openSafetensors), or a list of shards. */
export type HfWeights = SafetensorsFile | LazySafetensorsFile | readonly (SafetensorsFile | LazySafetensorsFile)[];

export interface HfLayerOptions {
  /** The layer index, 0 … num_hidden_layers − 1. */
  layer: number;
  /** The most positions (sequence plus KV cache) the layer will see: needed by 'dynamic' and 'longrope' ropes only. */
  maxPositions?: number;
}

/** The config as built for the engine (headDim given only when H·Dh ≠ E). */
export type HfAttentionConfig = MultiHeadAttentionConfig;

export interface HfAttentionLayer {
  config: HfAttentionConfig;
  stateDict: Record<string, Float32Array>;
  /** What each call of the layer needs (window counts keys the query's own included, as HF's sliding_window). */
  forward: { isCausal: true; window?: number; scale?: number; softcap?: number; sinks?: Float32Array };
  /** config.model_type (of the text model for multimodal checkpoints). */
  architecture: string;
  layer: ModelLayer;
}

interface Entry {
  name: string;
  dtype: string;
  shape: number[];
  read(): Promise<Float32Array>;
}

const READABLE = new Set(['F32', 'F16', 'BF16', 'F64']);

function sourcesOf(weights: unknown): (SafetensorsFile | LazySafetensorsFile)[] {
  const list = Array.isArray(weights) ? weights : [weights];
  list.forEach((w, i) => {
    if (!(w instanceof Map) && !isLazySafetensors(w)) {
      throw new InvalidArgumentError({
        where: WHERE,
        argument: Array.isArray(weights) ? `weights[${i}]` : 'weights',
        expected: 'a SafetensorsFile (loadSafetensors / parseSafetensors), a lazy one (openSafetensors), or an array of them (shards)',
        given: describe(w),
        fix: 'Pass await loadSafetensors(file) or await openSafetensors(file) for each .safetensors shard.',
      });
    }
  });
  if (list.length === 0) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'weights', expected: 'at least one .safetensors file', given: 'an empty array' });
  }
  return list as (SafetensorsFile | LazySafetensorsFile)[];
}

function find(sources: (SafetensorsFile | LazySafetensorsFile)[], name: string): Entry | undefined {
  for (const s of sources) {
    if (s instanceof Map) {
      const t = s.get(name);
      if (t) return { name, dtype: t.dtype, shape: t.shape, read: async () => t.data };
    } else {
      const info = s.tensors.get(name);
      if (info) return { name, dtype: info.dtype, shape: info.shape, read: async () => (await s.tensor(name)).data };
    }
  }
  return undefined;
}

function* names(sources: (SafetensorsFile | LazySafetensorsFile)[]): Generator<string> {
  for (const s of sources) yield* s instanceof Map ? s.keys() : s.tensors.keys();
}

const PREFIXES = ['model.layers.', 'model.language_model.layers.', 'language_model.model.layers.', 'layers.'];

/** `{P}{L}.self_attn.` of the checkpoint: the first prefix some shard has the layer's o_proj under. */
function attnPrefix(sources: (SafetensorsFile | LazySafetensorsFile)[], L: number): string {
  for (const p of PREFIXES) if (find(sources, `${p}${L}.self_attn.o_proj.weight`)) return `${p}${L}.self_attn.`;
  const re = new RegExp(`^(.*\\.)?layers\\.${L}\\.self_attn\\.o_proj\\.weight$`);
  for (const n of names(sources)) if (re.test(n)) return n.slice(0, -'o_proj.weight'.length);
  const sample = [...names(sources)].filter((n) => /self_attn/.test(n)).slice(0, 6);
  throw new MissingWeightError({
    where: WHERE,
    argument: `tensor "model.layers.${L}.self_attn.o_proj.weight"`,
    expected: `layer ${L}'s attention tensors under one of ${PREFIXES.map((p) => `${p}${L}.self_attn.`).join(', ')}`,
    given: 'no such tensor in any of the files',
    fix: sample.length
      ? `The files' attention tensors look like: ${sample.join(', ')}. For a sharded checkpoint pass every shard (or the one holding layer ${L}).`
      : 'These files hold no self_attn tensors: pass the model’s .safetensors shards.',
  });
}

/**
 * The config, state_dict and forward options of attention layer `options.layer` of a Hugging Face
 * checkpoint. `config`: config.json (object or text); `weights`: its .safetensors file(s), parsed or lazy
 * (openSafetensors; then only this layer's tensors are read), one or an array of shards. Families:
 * see HF_FAMILIES and docs at the top of src/weights/hf.ts. Throws UnsupportedError for what the engine
 * does not compute exactly (naming the architecture, the layer and what is missing), InvalidArgumentError
 * for a layer past num_hidden_layers or a malformed config, MissingWeightError / ShapeMismatchError for
 * weights that disagree with the config. Every check precedes every read.
 */
export function attentionLayerFromHf(config: unknown, weights: HfWeights, options: HfLayerOptions): Promise<HfAttentionLayer> {
  return loadHfLayer(config, weights, options, ENGINE_FEATURES);
}

/**
 * attentionLayerFromHf with the engine features to build for given (tests of the layers whose features
 * are on other branches: their config and state_dict before the engine runs them).
 */
export async function loadHfLayer(config: unknown, weights: HfWeights, options: HfLayerOptions, features: EngineFeatures): Promise<HfAttentionLayer> {
  const parsed = parseHfConfig(config);
  const { layer: L, maxPositions } = options ?? ({} as HfLayerOptions);
  if (maxPositions !== undefined && (!Number.isInteger(maxPositions) || maxPositions <= 0)) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.maxPositions', expected: 'a positive integer', given: String(maxPositions) });
  }
  const p = parsed.plan(L, maxPositions, features);
  if (p.refusal) throw p.refusal;
  const sources = sourcesOf(weights);
  const prefix = attnPrefix(sources, L);
  const { E, H, G, Dh } = p;
  const dims = `E = ${E}, H = ${H}, G = ${G}, Dh = ${Dh}`;

  const need = (suffix: string, shape: number[], why: string): Entry => {
    const name = `${prefix}${suffix}`;
    const e = find(sources, name);
    if (!e) {
      const near = [...names(sources)].filter((n) => n.startsWith(prefix)).slice(0, 12);
      throw new MissingWeightError({
        where: WHERE,
        argument: `tensor "${name}"`,
        expected: `present (${why}) for ${p.architecture} layer ${L}`,
        given: 'no such tensor in the files',
        fix: near.length ? `Layer ${L}'s attention tensors in the files: ${near.join(', ')}.` : `No tensor starts with ${prefix}; pass the shard holding layer ${L}.`,
      });
    }
    if (e.shape.length !== shape.length || e.shape.some((s, i) => s !== shape[i])) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument: `tensor "${name}"`,
        expected: `shape [${shape.join(', ')}] (${why}; ${dims} from config.json)`,
        given: `shape [${e.shape.join(', ')}]`,
        fix: 'config.json and the weights disagree (hidden_size, num_attention_heads, num_key_value_heads, head_dim): use the config of the checkpoint these weights come from.',
      });
    }
    if (!READABLE.has(e.dtype)) {
      throw new UnsupportedError({
        where: WHERE,
        argument: `tensor "${name}"`,
        expected: 'F32, F16, BF16 or F64',
        given: e.dtype,
        fix: 'Quantized checkpoints (FP8, MXFP4, …) are not read by this loader; use a float checkpoint or a GGUF file.',
      });
    }
    return e;
  };

  if (p.keyIsValue && p.qkvBias) {
    throw new UnsupportedError({
      where: WHERE,
      argument: `layer ${L} of ${p.architecture}`,
      expected: 'a K = V layer without biases',
      given: 'attention_k_eq_v with attention_bias',
      fix: 'This engine has no bias layout for K = V layers.',
    });
  }
  // Every tensor is found and checked before any is read.
  const qRows = p.outputGate ? 2 * H * Dh : H * Dh;
  const t: Record<string, Entry> = {};
  if (p.fusedQkv) {
    t.qkv = need('qkv_proj.weight', [(H + 2 * G) * Dh, E], 'the fused q, k, v projection [(H + 2G)·Dh, E]');
  } else {
    t.q = need('q_proj.weight', [qRows, E], p.outputGate ? 'the query and gate projection [2·H·Dh, E]' : 'the query projection [H·Dh, E]');
    t.k = need('k_proj.weight', [G * Dh, E], 'the key projection [G·Dh, E]');
    if (!p.keyIsValue) t.v = need('v_proj.weight', [G * Dh, E], 'the value projection [G·Dh, E]');
    if (p.qkvBias) {
      t.qb = need('q_proj.bias', [qRows], 'attention_bias');
      t.kb = need('k_proj.bias', [G * Dh], 'attention_bias');
      if (!p.keyIsValue) t.vb = need('v_proj.bias', [G * Dh], 'attention_bias');
    }
  }
  t.o = need('o_proj.weight', [E, H * Dh], 'the output projection [E, H·Dh]');
  if (p.outBias) t.ob = need('o_proj.bias', [E], 'attention_bias');
  if (p.qkNorm) {
    const all = p.qkNorm === 'all';
    t.qn = need('q_norm.weight', [all ? H * Dh : Dh], all ? 'the query norm over the whole projection [H·Dh]' : 'the per-head query norm [Dh]');
    t.kn = need('k_norm.weight', [all ? G * Dh : Dh], all ? 'the key norm over the whole projection [G·Dh]' : 'the per-head key norm [Dh]');
  }
  if (p.sinks) t.sinks = need('sinks', [H], 'the learned attention sinks [H]');

  const data: Record<string, Float32Array> = {};
  for (const [k, e] of Object.entries(t)) data[k] = await e.read();

  const cfg: HfAttentionConfig = { embedDim: E, numHeads: H };
  if (G !== H) cfg.numKvHeads = G;
  if (H * Dh !== E) cfg.headDim = Dh;
  const stateDict: Record<string, Float32Array> = {};
  if (p.fusedQkv) stateDict.in_proj_weight = data.qkv;
  else {
    if (p.outputGate) {
      const { first, second } = splitPerHead(data.q, H, Dh, E);
      stateDict.q_proj_weight = first;
      stateDict.gate_proj_weight = second;
      cfg.outputGate = true;
    } else stateDict.q_proj_weight = data.q;
    stateDict.k_proj_weight = data.k;
    if (p.keyIsValue) cfg.kEqV = true;
    else stateDict.v_proj_weight = data.v;
  }
  stateDict['out_proj.weight'] = data.o;
  cfg.bias = p.qkvBias || p.outBias;
  if (cfg.bias) {
    const inBias = new Float32Array((H + 2 * G) * Dh);
    if (p.qkvBias) {
      if (p.outputGate) {
        const { first, second } = splitPerHead(data.qb, H, Dh, 1);
        inBias.set(first, 0);
        stateDict.gate_proj_bias = second;
      } else inBias.set(data.qb, 0);
      inBias.set(data.kb, H * Dh);
      inBias.set(data.vb, (H + G) * Dh);
    }
    stateDict.in_proj_bias = inBias;
    stateDict['out_proj.bias'] = p.outBias ? data.ob : new Float32Array(E);
  }
  if (p.qkNorm) {
    const w = (x: Float32Array) => (p.normPlusOne ? x.map((v) => v + 1) : x);
    cfg.qkNorm = { query: w(data.qn), key: w(data.kn), eps: p.eps };
    if (p.qkNorm === 'all') cfg.qkNorm.over = 'all';
  }
  if (p.vNorm) cfg.vNorm = { eps: p.eps };
  if (p.rope) cfg.rotary = { dim: p.rope.dim, interleaved: false, invFreq: p.rope.invFreq, attentionFactor: p.rope.attentionFactor };

  const forward: HfAttentionLayer['forward'] = { isCausal: true };
  if (p.layer.window !== undefined) forward.window = p.layer.window;
  if (p.scale !== undefined) forward.scale = p.scale;
  if (p.softcap !== undefined) forward.softcap = p.softcap;
  if (p.sinks) forward.sinks = data.sinks;
  return { config: cfg, stateDict, forward, architecture: p.architecture, layer: p.layer };
}

/** Rows [first_h (Dh), second_h (Dh)] per head h of a [2·H·Dh, cols] matrix, as two [H·Dh, cols] ones. */
function splitPerHead(m: Float32Array, H: number, Dh: number, cols: number): { first: Float32Array; second: Float32Array } {
  const first = new Float32Array(H * Dh * cols);
  const second = new Float32Array(H * Dh * cols);
  const block = Dh * cols;
  for (let h = 0; h < H; h++) {
    first.set(m.subarray(2 * h * block, (2 * h + 1) * block), h * block);
    second.set(m.subarray((2 * h + 1) * block, (2 * h + 2) * block), h * block);
  }
  return { first, second };
}

/**
 * Every layer of the model as config.json describes it (kind, window, rope, heads, head size), with
 * `unsupported` the reason attentionLayerFromHf refuses a layer (null when it builds it). Reads no
 * weights. Throws what parsing the config throws (unknown model_type, malformed sizes).
 */
export function hfModelLayers(config: unknown): ModelLayer[] {
  const parsed = parseHfConfig(config);
  const out: ModelLayer[] = [];
  for (let L = 0; L < parsed.numLayers; L++) out.push(parsed.plan(L, 1).layer);
  return out;
}
