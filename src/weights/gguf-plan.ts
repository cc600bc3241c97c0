// What the header of a GGUF file says about one attention layer, before any tensor is read: its sizes,
// llama.cpp's rules for it (gguf-rules.ts), its rotary, and every check that can refuse it. The loader
// (gguf-layer.ts) then reads the layer's tensors; ggufModelLayers lists every layer from these plans.

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';
import { describe } from '../validate.ts';
import { describeValue } from './gguf-header.ts';
import { type GgufFile, type GgufValue, parseGguf } from './gguf.ts';
import { REFUSED, ROPE_NEOX, ROPE_NONE, ROPE_NORM, layerRules, refusedArchitecture } from './gguf-rules.ts';
import type { ModelLayer } from './model-layers.ts';
import { WeightFileError } from './safetensors.ts';

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

export const WHERE = 'attentionLayerFromGguf';

/** What the header says about one layer (no tensor read), after every check that can refuse it. */
export interface LayerPlan {
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

export function asGgufFile(file: unknown, where: string): GgufFile {
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

export function architectureOf(f: GgufFile, where: string): string {
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

export function blockCount(f: GgufFile, arch: string): number {
  const v = f.metadata.get(`${arch}.block_count`);
  return typeof v === 'number' || typeof v === 'bigint' ? Number(v) : countBlocks(f);
}

/**
 * Plans layer `options.layer` from the header. `seen` collects the sizes as they are read (for
 * ggufModelLayers' entry of a layer that is then refused).
 */
export function planLayer(f: GgufFile, options: GgufLayerOptions, seen: Partial<ModelLayer> = {}): LayerPlan {
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
  let forms: ('head' | 'all')[] = ['head', 'all'];
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
        expected: `a norm of each head, [Dh = ${Dh}] (Qwen3, Gemma 3), or of the whole projection, [${whole}] (OLMo 2), as its twin`,
        given: `${n} weights${n === whole ? ' (a norm over all heads at once, as OLMo 2 has)' : ''}`,
        fix: 'The file is damaged or of a layout this reader does not know.',
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

/** block_count when the metadata lacks it: one more than the highest blk.N of the tensor names. */
function countBlocks(f: GgufFile): number {
  let n = 0;
  for (const name of f.tensors.keys()) {
    const m = /^blk\.(\d+)\./.exec(name);
    if (m) n = Math.max(n, Number(m[1]) + 1);
  }
  return n;
}
