// One attention layer of a GGUF model (a llama.cpp file) as this engine's config and state_dict.
//
//   GGUF tensor (ggml ne = [K, N])              → state_dict (row-major [N, K], nn.Linear's)
//   blk.{L}.attn_q.weight   [E, H·Dh]            q_proj_weight [H·Dh, E]
//   blk.{L}.attn_k.weight   [E, G·Dh]            k_proj_weight [G·Dh, E]
//   blk.{L}.attn_v.weight   [E, G·Dh]            v_proj_weight [G·Dh, E]
//   blk.{L}.attn_qkv.weight [E, (H+2G)·Dh]       in_proj_weight (fused: Phi-3, GPT-2, …)
//   blk.{L}.attn_{q,k,v,qkv}.bias                in_proj_bias [(H+2G)·Dh] (q, k, v; zeros for one missing)
//   blk.{L}.attn_output.weight [H·Dh, E], .bias  out_proj.weight [E, H·Dh], out_proj.bias [E] (zeros if missing)
//   blk.{L}.attn_{q,k}_norm.weight [Dh]          config.qkNorm { query, key, eps }
//
// Weights stay in the file's types (Q4_0, Q8_0, Q4_K, Q6_K blocks or float32), never expanded. The
// sizes and rotary come from `{arch}.*` metadata. Rotary follows llama.cpp's llama_model_rope_type:
// its "normal" rope rotates adjacent pairs (interleaved: true; the converter permuted Llama's Q/K rows
// for it), NEOX rope rotates halves.

import { InvalidArgumentError, MissingWeightError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import type { GgufQuantizedTensor } from '../quant/types.ts';
import type { MultiHeadAttentionConfig } from '../types.ts';
import { QK_NORM_KEYS } from '../option-keys.ts';
import { describe } from '../validate.ts';
import { describeValue } from './gguf-header.ts';
import { type GgufFile, type GgufTensor, type GgufValue, parseGguf } from './gguf.ts';
import { REFUSED, ROPE_NEOX, ROPE_NONE, ROPE_NORM, ggmlRotary, layerRules, refusedArchitecture } from './gguf-rules.ts';
import type { ModelLayer } from './model-layers.ts';
import { WeightFileError } from './safetensors.ts';

/** A state_dict whose projection weights may be GGUF block tensors; biases are float32. */
export type GgufStateDict = Record<string, Float32Array | GgufQuantizedTensor>;

/** attentionLayerFromGguf's options. */
export interface GgufLayerOptions {
  /** The block (layer) index, 0 … `{arch}.block_count` − 1. */
  layer: number;
  /**
   * Rotary pairs: true adjacent (llama.cpp's normal rope), false halves (NEOX). Default from the
   * architecture; needed for one this reader does not know.
   */
  interleaved?: boolean;
  /**
   * No longer needed: scaled rope (rope_freqs.weight, linear factors, YaRN) comes as inverse
   * frequencies (config.rotary.invFreq), which work at any position. Accepted and ignored.
   */
  maxPositions?: number;
}

/** attentionLayerFromGguf's result: createMultiHeadAttention's two arguments, and how to call forward. */
export interface GgufAttentionLayer {
  config: MultiHeadAttentionConfig;
  stateDict: GgufStateDict;
  /** `general.architecture`. */
  architecture: string;
  /**
   * Forward options the layer needs, as llama.cpp runs it: causal, plus `scale` (Gemma 2/3, or the
   * file's attention.scale), `softcap` (Gemma 2), `window` (sliding layers of Gemma 2/3 and gpt-oss)
   * and `sinks` (gpt-oss) where the model has them.
   */
  forward: { isCausal: true; scale?: number; softcap?: number; window?: number; sinks?: Float32Array };
}

const WHERE = 'attentionLayerFromGguf';

/** What the header says about one layer (no tensor read), after every check that can refuse it. */
interface LayerPlan {
  arch: string;
  layer: number;
  E: number;
  H: number;
  G: number;
  Dh: number;
  /** Rotary pairs, or undefined for a layer without rope (an architecture without, or a NoPE layer). */
  interleaved?: boolean;
  ropeDim: number;
  yarn?: { nCtxOrig: number; betaFast: number; betaSlow: number };
  rules: ReturnType<typeof layerRules>;
  num: (k: string, fallback?: number) => number;
  /** The QK-norm's weights: per head [Dh], or over the whole projection (OLMo 2). */
  qkNormOver?: 'head' | 'all';
}

/**
 * Whether the engine takes a QK-norm over the whole projection (config.qkNorm.over: 'all', being added
 * on another branch for issue 39). Until it does, OLMo 2's norm is refused; once merged, this is true
 * and can go.
 */
const QK_NORM_OVER_ALL = (QK_NORM_KEYS as readonly string[]).includes('over');

function asGgufFile(file: unknown, where: string): GgufFile {
  const f = file instanceof ArrayBuffer || file instanceof Uint8Array ? parseGguf(file) : file;
  if (typeof f !== 'object' || f === null || !((f as GgufFile).metadata instanceof Map) || !((f as GgufFile).tensors instanceof Map)) {
    throw new InvalidArgumentError({
      where,
      argument: 'file',
      expected: 'a GgufFile (from loadGguf or parseGguf) or the bytes of a .gguf file',
      given: describe(file),
      fix: 'Pass await loadGguf(source) for a Blob, a Response, a URL or a path.',
    });
  }
  return f as GgufFile;
}

function architectureOf(f: GgufFile, where: string): string {
  const archValue = f.metadata.get('general.architecture');
  if (typeof archValue !== 'string') {
    throw new WeightFileError({
      where,
      argument: 'metadata key "general.architecture"',
      expected: 'a string (llama, qwen2, …)',
      given: describeValue(archValue),
      fix: 'This file does not describe a model; convert the model with llama.cpp.',
      problem: 'header',
    });
  }
  return archValue;
}

function blockCount(f: GgufFile, arch: string): number {
  const v = f.metadata.get(`${arch}.block_count`);
  return typeof v === 'number' || typeof v === 'bigint' ? Number(v) : countBlocks(f);
}

/**
 * Plans layer `options.layer` from the header. `seen` collects the sizes as they are read (for
 * ggufModelLayers' entry of a layer that is then refused).
 */
function planLayer(f: GgufFile, options: GgufLayerOptions, seen: Partial<ModelLayer> = {}): LayerPlan {
  const { layer } = options ?? ({} as GgufLayerOptions);
  const arch = architectureOf(f, WHERE);
  const key = (k: string) => `${arch}.${k}`;
  const has = (k: string) => f.metadata.has(key(k));
  /** A numeric metadata value (u64 and per-layer arrays included), or `fallback` when absent. */
  const num = (k: string, fallback?: number): number => {
    let v = f.metadata.get(key(k));
    if (Array.isArray(v) && Number.isInteger(layer)) v = v[layer];
    if (v === undefined && fallback !== undefined) return fallback;
    if (typeof v === 'number' || typeof v === 'bigint') return Number(v);
    throw new WeightFileError({
      where: WHERE,
      argument: `metadata key "${key(k)}"`,
      expected: 'a number',
      given: describeValue(v),
      fix: 'The file lacks the model sizes this layer needs; convert the model again with llama.cpp.',
      problem: 'header',
    });
  };
  const blocks = has('block_count') ? num('block_count') : countBlocks(f);
  if (!Number.isInteger(layer) || layer < 0 || layer >= blocks) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.layer',
      expected: `an integer 0 … ${blocks - 1} (${key('block_count')} = ${blocks})`,
      given: String(layer),
      fix: `Pass { layer } with a block index below ${blocks}.`,
    });
  }
  const E = num('embedding_length');
  const H = num('attention.head_count');
  const G = num('attention.head_count_kv', H);
  Object.assign(seen, { numHeads: H, numKvHeads: G });
  if (G === 0) {
    seen.kind = 'linear';
    throw new UnsupportedError({
      where: WHERE,
      argument: `layer ${layer}`,
      expected: 'an attention layer',
      given: `${key('attention.head_count_kv')} = 0 for it (a recurrent or state-space block of a hybrid model)`,
      fix: 'Pick a layer whose head_count_kv is not 0.',
    });
  }
  // llama.cpp: n_embd_head_k = attention.key_length, default n_embd / n_head (llama-model.cpp load_hparams).
  if (!has('attention.key_length') && E % H !== 0) {
    throw new WeightFileError({
      where: WHERE,
      argument: `metadata key "${key('attention.key_length')}"`,
      expected: `present, as embedding_length ${E} is not a multiple of head_count ${H}`,
      given: 'absent',
      fix: 'The header is damaged; convert the model again.',
      problem: 'header',
    });
  }
  const Dh = num('attention.key_length', E / H);
  seen.headDim = Dh;
  const Dv = num('attention.value_length', Dh);
  if (Dv !== Dh || !Number.isInteger(Dh) || Dh <= 0) {
    throw new UnsupportedError({
      where: WHERE,
      argument: `metadata key "${key('attention.value_length')}"`,
      expected: `the key head size ${key('attention.key_length')} = ${Dh}`,
      given: String(Dv),
      fix: 'This engine takes one head size for queries, keys and values.',
    });
  }
  if (H % G !== 0) {
    throw new WeightFileError({
      where: WHERE,
      argument: `metadata key "${key('attention.head_count_kv')}"`,
      expected: `a divisor of head_count ${H}`,
      given: String(G),
      fix: 'The header is damaged; convert the model again.',
      problem: 'header',
    });
  }
  const rules = layerRules(arch, layer, blocks, E, H, Dh, num, has);
  if (rules.window !== undefined) Object.assign(seen, { kind: 'sliding', window: rules.window });
  seen.rope = rules.rope && !ROPE_NONE.has(arch);
  if (REFUSED[arch]) throw refusedArchitecture(arch, layer);
  const t = (suffix: string) => `blk.${layer}.${suffix}`;
  // QK-norm: per head [Dh], or one norm over the whole projection [H·Dh] / [G·Dh] (OLMo 2: llama.cpp's
  // src/models/olmo2.cpp norms Qcur and Kcur before the reshape to heads) where the engine has it.
  // The forms each norm's size fits (with one head of K, [Dh] is both), then the one both fit.
  let forms: ('head' | 'all')[] = QK_NORM_OVER_ALL ? ['head', 'all'] : ['head'];
  let present = false;
  for (const s of ['attn_q_norm.weight', 'attn_k_norm.weight']) {
    const info = f.tensors.get(t(s));
    if (!info) continue;
    present = true;
    const n = info.dims.reduce((a, b) => a * b, 1);
    const whole = (s.startsWith('attn_q') ? H : G) * Dh;
    const fits = forms.filter((o) => n === (o === 'head' ? Dh : whole));
    if (fits.length === 0) {
      throw new UnsupportedError({
        where: WHERE,
        argument: `tensor "${t(s)}" (${arch}, layer ${layer})`,
        expected: `a norm of each head, [Dh = ${Dh}] (Qwen3, Gemma 3)${QK_NORM_OVER_ALL ? `, or of the whole projection, [${whole}] (OLMo 2), as its twin` : ''}`,
        given: `${n} weights${n === whole ? ' (a norm over all heads at once, as OLMo 2 has)' : ''}`,
        fix: QK_NORM_OVER_ALL
          ? 'The file is damaged or of a layout this reader does not know.'
          : "This engine applies QK-norm per head only (a norm over the whole projection, qkNorm over 'all', is not there yet).",
      });
    }
    forms = fits;
  }
  const qkNormOver = present ? forms[0] : undefined;
  // Keys some llama.cpp versions and converters write (the converter from a config's layer_types): which
  // layers slide, and the sliding layers' rope base/scale. The rules above hard-code both per
  // architecture, as llama.cpp's load_hparams does; a file that states them is accepted where it agrees
  // with those rules for this layer and refused where it does not, never run with values it contradicts.
  const sliding = rules.window !== undefined;
  const stated = (k: string) => (f.metadata.has(key(k)) ? f.metadata.get(key(k)) : undefined);
  const contradiction = (k: string, value: GgufValue | undefined, ours: string) =>
    new UnsupportedError({
      where: WHERE,
      argument: `metadata key "${key(k)}" (${arch}, layer ${layer})`,
      expected: `what llama.cpp's built-in rule for ${JSON.stringify(arch)} gives this layer: ${ours}`,
      given: describeValue(value),
      fix: 'This reader applies the built-in rule only; a file that states another would be run otherwise by some llama.cpp versions.',
    });
  const pattern = stated('attention.sliding_window_pattern');
  if (pattern !== undefined) {
    const p = Array.isArray(pattern) ? pattern[layer] : pattern;
    const says = typeof p === 'boolean' ? p : typeof p === 'number' || typeof p === 'bigint' ? Number(p) > 0 && layer % Number(p) < Number(p) - 1 : null;
    if (says !== sliding) throw contradiction('attention.sliding_window_pattern', pattern, sliding ? 'a sliding layer' : 'a full-attention layer');
  }
  for (const [k, ours] of [
    ['rope.freq_base_swa', rules.freqBase],
    ['rope.freq_scale_swa', rules.freqScale],
  ] as const) {
    const v = stated(k);
    if (v !== undefined && sliding && Number(v) !== ours) throw contradiction(k, v, String(ours));
  }

  if (arch !== 'gpt-oss' && (f.tensors.has(t('attn_sinks.weight')) || f.tensors.has(t('attn_sinks')))) {
    throw new UnsupportedError({
      where: WHERE,
      argument: `tensor "${t('attn_sinks.weight')}"`,
      expected: 'attention sinks only in a gpt-oss file (the one architecture this reader knows to use them)',
      given: `a sinks tensor in a ${JSON.stringify(arch)} file`,
      fix: 'This reader does not know how llama.cpp uses them for this architecture.',
    });
  }
  const plan: LayerPlan = { arch, layer, E, H, G, Dh, ropeDim: Dh, rules, num, qkNormOver };
  if (!rules.rope) return plan;
  const unsupported = (argument: string, given: string, fix: string) =>
    new UnsupportedError({ where: WHERE, argument, expected: 'rotary embeddings this reader can describe (llama.cpp normal or NEOX rope)', given, fix });
  let interleaved = options.interleaved;
  if (interleaved === undefined) {
    if (ROPE_NONE.has(arch)) return plan;
    if (ROPE_NORM.has(arch)) interleaved = true;
    else if (ROPE_NEOX.has(arch)) interleaved = false;
    else if (/vl/.test(arch)) throw unsupported('metadata key "general.architecture"', JSON.stringify(arch), 'Multimodal rope (M-RoPE) is not run by this engine.');
    else {
      throw unsupported(
        'metadata key "general.architecture"',
        `${JSON.stringify(arch)}, whose rope this reader does not know`,
        'Pass options.interleaved: true if llama.cpp runs it with normal rope (llama-style), false for NEOX rope (halves).',
      );
    }
  }
  plan.interleaved = interleaved;
  plan.ropeDim = num('rope.dimension_count', Dh);
  for (const name of ['rope_factors_long.weight', 'rope_factors_short.weight']) {
    if (f.tensors.has(name)) {
      throw unsupported(`tensor "${name}"`, 'LongRoPE factors (Phi-3 128k, Phi-4-mini)', 'llama.cpp picks long or short factors by context size; not read here.');
    }
  }
  // llama-context.cpp: `cparams.yarn_attn_factor *= hparams.rope_attn_factor;` multiplies every rope's cos/sin.
  if (has('rope.scaling.attn_factor') && num('rope.scaling.attn_factor') !== 1) {
    throw unsupported(`metadata key "${key('rope.scaling.attn_factor')}"`, String(num('rope.scaling.attn_factor')), 'A rope attention factor other than 1 is not read.');
  }
  const scalingKey = key('rope.scaling.type');
  const scaling = f.metadata.get(scalingKey);
  if (scaling === 'yarn') {
    for (const k of ['rope.scaling.yarn_ext_factor', 'rope.scaling.yarn_attn_factor', 'rope.scaling.yarn_log_multiplier']) {
      if (has(k)) throw unsupported(`metadata key "${key(k)}"`, String(num(k)), 'YaRN with the default ext_factor 1 and attn_factor 1 only is read.');
    }
    // llama.cpp: n_ctx_orig_yarn = rope.scaling.original_context_length (default n_ctx_train); β_fast/β_slow
    // default 32 and 1 (llama-context.cpp, common's yarn_beta_fast/slow).
    plan.yarn = {
      nCtxOrig: num('rope.scaling.original_context_length', num('context_length')),
      betaFast: num('rope.scaling.yarn_beta_fast', 32),
      betaSlow: num('rope.scaling.yarn_beta_slow', 1),
    };
  } else if (scaling !== undefined && scaling !== 'none' && scaling !== 'linear') {
    throw unsupported(`metadata key "${scalingKey}"`, JSON.stringify(scaling), 'Only linear and YaRN rope scaling are read.');
  }
  return plan;
}

/**
 * The config and state_dict of attention layer `options.layer` of a GGUF model (see the table at the
 * top of src/weights/gguf-layer.ts), weights in the file's types, and the forward options the layer
 * needs (result.forward: causal, and the window, scale, softcap and sinks llama.cpp uses for it).
 * Architectures llama.cpp runs with rules of their own follow them (gguf-rules.ts: SmolLM3's NoPE
 * layers, Gemma 2/3's windows, scales and softcap, Gemma 3's per-layer rope, gpt-oss's sinks, windows
 * and YaRN, Llama 3's rope_freqs); a head size other than E/H sets `headDim`. Throws UnsupportedError
 * for what the engine does not run (a QK-norm over all heads, M-RoPE, LongRoPE, an architecture with
 * rules not read here, named in the error), InvalidArgumentError for a layer past block_count,
 * MissingWeightError / ShapeMismatchError / WeightFileError for the file's tensors.
 */
export async function attentionLayerFromGguf(file: GgufFile | ArrayBuffer | Uint8Array, options: GgufLayerOptions): Promise<GgufAttentionLayer> {
  const f = asGgufFile(file, WHERE);
  const plan = planLayer(f, options);
  const { arch, layer, E, H, G, Dh, rules, num } = plan;
  const key = (k: string) => `${arch}.${k}`;
  const config: MultiHeadAttentionConfig = { embedDim: E, numHeads: H };
  if (G !== H) config.numKvHeads = G;
  if (Dh * H !== E) config.headDim = Dh;

  const t = (suffix: string) => `blk.${layer}.${suffix}`;
  const has = (suffix: string) => f.tensors.has(t(suffix));
  const missing = (suffix: string, expected: string) =>
    new MissingWeightError({
      where: WHERE,
      argument: `tensor "${t(suffix)}"`,
      expected,
      given: 'no such tensor in the file',
      fix: `The file's tensors of block ${layer}: ${[...f.tensors.keys()].filter((n) => n.startsWith(t(''))).join(', ') || 'none'}.`,
    });
  const readNamed = async (name: string, shape: number[]) => {
    const info = f.tensors.get(name)!;
    const dims = [...info.dims];
    while (dims.length > shape.length && dims[dims.length - 1] === 1) dims.pop();
    const given = [...dims].reverse();
    if (given.length !== shape.length || given.some((d, i) => d !== shape[i])) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument: `tensor "${name}"`,
        expected: `of shape [${shape.join(', ')}] (ne [${[...shape].reverse().join(', ')}]) for E = ${E}, H = ${H}, G = ${G}, Dh = ${Dh}`,
        given: `shape [${given.join(', ')}] (ne [${info.dims.join(', ')}])`,
        fix: `The metadata (${key('embedding_length')}, ${key('attention.head_count')}, ${key('attention.head_count_kv')}, ${key('attention.key_length')}) and this tensor disagree: the file is damaged or of an architecture laid out otherwise.`,
      });
    }
    return f.tensor(name);
  };
  const read = (suffix: string, shape: number[]) => readNamed(t(suffix), shape);
  const float = async (suffix: string, length: number) => asFloat(t(suffix), await read(suffix, [length]));

  const stateDict: GgufStateDict = {};
  const qkvRows = (H + 2 * G) * Dh;
  const biases: (Float32Array | undefined)[] = [];
  if (has('attn_qkv.weight')) {
    stateDict.in_proj_weight = await read('attn_qkv.weight', [qkvRows, E]);
    if (has('attn_qkv.bias')) biases.push(await float('attn_qkv.bias', qkvRows));
  } else {
    for (const [name, rows] of [
      ['q', H * Dh],
      ['k', G * Dh],
      ['v', G * Dh],
    ] as const) {
      if (!has(`attn_${name}.weight`)) throw missing(`attn_${name}.weight`, `present (or a fused blk.${layer}.attn_qkv.weight)`);
      stateDict[`${name}_proj_weight`] = await read(`attn_${name}.weight`, [rows, E]);
      biases.push(has(`attn_${name}.bias`) ? await float(`attn_${name}.bias`, rows) : undefined);
    }
  }
  if (!has('attn_output.weight')) throw missing('attn_output.weight', 'present (the output projection)');
  stateDict['out_proj.weight'] = await read('attn_output.weight', [E, H * Dh]);
  const outBias = has('attn_output.bias') ? await float('attn_output.bias', E) : undefined;
  const bias = outBias !== undefined || biases.some((b) => b !== undefined);
  config.bias = bias;
  if (bias) {
    // Qwen2: q/k/v biases and no output bias; a missing one is zeros.
    const inBias = new Float32Array(qkvRows);
    const sizes = biases.length === 1 ? [qkvRows] : [H * Dh, G * Dh, G * Dh];
    let at = 0;
    sizes.forEach((n, i) => {
      if (biases[i]) inBias.set(biases[i]!, at);
      at += n;
    });
    stateDict.in_proj_bias = inBias;
    stateDict['out_proj.bias'] = outBias ?? new Float32Array(E);
  }

  if (plan.interleaved !== undefined) {
    let freqFactors: Float32Array | undefined;
    if (f.tensors.has('rope_freqs.weight')) {
      freqFactors = asFloat('rope_freqs.weight', await f.tensor('rope_freqs.weight'));
      if (freqFactors.length !== plan.ropeDim / 2) {
        throw new ShapeMismatchError({
          where: WHERE,
          argument: 'tensor "rope_freqs.weight"',
          expected: `${plan.ropeDim / 2} frequency factors (rope dim / 2)`,
          given: `${freqFactors.length}`,
          fix: 'The file is damaged or its rope.dimension_count is wrong.',
        });
      }
    }
    config.rotary = ggmlRotary({ dim: plan.ropeDim, interleaved: plan.interleaved, base: rules.freqBase, freqScale: rules.freqScale, freqFactors, yarn: plan.yarn });
  }

  if (has('attn_q_norm.weight') || has('attn_k_norm.weight')) {
    for (const s of ['attn_q_norm.weight', 'attn_k_norm.weight']) {
      if (!has(s)) throw missing(s, 'present, as its query/key twin is (QK-norm)');
    }
    // Gemma 3's norms are (1 + w) in transformers; llama.cpp's converter writes 1 + w into the file
    // (Gemma3Model.modify_tensors), so the file's weights are used as they are.
    const all = plan.qkNormOver === 'all';
    config.qkNorm = {
      query: await float('attn_q_norm.weight', all ? H * Dh : Dh),
      key: await float('attn_k_norm.weight', all ? G * Dh : Dh),
      eps: num('attention.layer_norm_rms_epsilon', 1e-6),
    };
    if (all) (config.qkNorm as typeof config.qkNorm & { over?: 'all' }).over = 'all';
  }
  const forward: GgufAttentionLayer['forward'] = { isCausal: true };
  if (rules.scale !== undefined) forward.scale = rules.scale;
  else if (f.metadata.has(key('attention.scale'))) forward.scale = num('attention.scale');
  // Softcap only where llama.cpp sets hparams.attn_soft_cap (Gemma 2; grok is refused): another
  // architecture's attn_logit_softcapping key is not used by its graph.
  if (rules.softcap !== undefined) forward.softcap = rules.softcap;
  if (rules.window !== undefined) forward.window = rules.window;
  if (arch === 'gpt-oss') {
    // src/models/openai-moe-iswa.cpp passes model.layers[il].attn_sinks to build_attn (one logit per head).
    const name = has('attn_sinks.weight') ? t('attn_sinks.weight') : t('attn_sinks');
    if (!f.tensors.has(name)) throw missing('attn_sinks.weight', 'present: gpt-oss layers have one sink logit per head');
    forward.sinks = asFloat(name, await readNamed(name, [H]));
  }
  return { config, stateDict, architecture: arch, forward };
}

/**
 * What a GGUF file's header says about each of its blocks (no tensor read): full or sliding attention
 * and the window, rope or NoPE, heads and head size, and why attentionLayerFromGguf would refuse it
 * (null when it loads). Throws for a file whose header lacks the sizes (WeightFileError) or that is
 * not a GgufFile (InvalidArgumentError).
 */
export function ggufModelLayers(file: GgufFile | ArrayBuffer | Uint8Array): ModelLayer[] {
  const where = 'ggufModelLayers';
  const f = asGgufFile(file, where);
  const arch = architectureOf(f, where);
  const layers: ModelLayer[] = [];
  for (let layer = 0; layer < blockCount(f, arch); layer++) {
    const seen: Partial<ModelLayer> = {};
    let unsupported: string | null = null;
    let plan: LayerPlan | undefined;
    try {
      plan = planLayer(f, { layer }, seen);
    } catch (e) {
      if (!(e instanceof UnsupportedError)) throw e;
      unsupported = e.message;
    }
    const entry: ModelLayer = {
      layer,
      kind: seen.kind ?? 'full',
      rope: plan ? plan.interleaved !== undefined : (seen.rope ?? true),
      numHeads: seen.numHeads ?? 0,
      numKvHeads: seen.numKvHeads ?? 0,
      headDim: seen.headDim ?? 0,
      unsupported,
    };
    if (seen.window !== undefined) entry.window = seen.window;
    layers.push(entry);
  }
  return layers;
}

function asFloat(name: string, v: GgufTensor): Float32Array {
  if (v instanceof Float32Array) return v;
  throw new UnsupportedError({
    where: WHERE,
    argument: `tensor "${name}"`,
    expected: 'F32, F16 or BF16 (a bias or norm weight is read as float32)',
    given: v.dtype.toUpperCase(),
    fix: 'Only projection weights may be quantized; convert the file keeping 1-D tensors in F32 (llama.cpp does so).',
  });
}

/** block_count when the metadata lacks it: one more than the highest blk.N of the tensor names. */
function countBlocks(f: GgufFile): number {
  let n = 0;
  for (const name of f.tensors.keys()) {
    const m = /^blk\.(\d+)\./.exec(name);
    if (m) n = Math.max(n, Number(m[1]) + 1);
  }
  return n;
}
