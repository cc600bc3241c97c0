// Each Hugging Face family's facts that do not depend on the layer being planned: model_type → family,
// the config classes' defaults (configuration_<family>.py, transformers 5.18), and the readers of
// config.json's per-layer keys (layer_types, no_rope_layers, Gemma 4's per_layer_config) and of its
// rope keys in both spellings (rope_theta / rope_scaling, rope_parameters per layer type). The layer
// plan that uses them is hf-config.ts.

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';
import { type HfRope, type RopeParameters, hfRope } from './hf-rope.ts';

export const WHERE = 'attentionLayerFromHf';

export type Json = Record<string, unknown>;

/** model_type → family. */
export const FAMILIES: Record<string, string> = {
  llama: 'llama',
  mistral: 'mistral',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen3_next: 'qwen3_next',
  qwen3_5: 'qwen3_5',
  qwen3_5_text: 'qwen3_5',
  gemma: 'gemma',
  gemma2: 'gemma2',
  gemma3: 'gemma3',
  gemma3_text: 'gemma3',
  gemma4: 'gemma4',
  gemma4_text: 'gemma4',
  gpt_oss: 'gpt_oss',
  smollm3: 'smollm3',
  phi3: 'phi3',
  olmo2: 'olmo2',
  olmo3: 'olmo3',
};
export const HF_FAMILIES = Object.keys(FAMILIES);

/** Config-class defaults that matter for attention (configuration_<family>.py). */
export interface FamilyDefaults {
  /** hidden_size, num_attention_heads, num_hidden_layers when config.json leaves them out (transformers 4 wrote a sub-config's defaults out of its text_config). */
  hiddenSize: number;
  numHeads: number;
  numLayers: number;
  headDim?: number;
  numKvHeads?: number | 'H';
  theta: number;
  eps: number;
  slidingWindow?: number | null;
  perLayerTypeRope?: boolean;
  partial?: number;
  maxPositions: number;
}
export const DEFAULTS: Record<string, FamilyDefaults> = {
  llama: { hiddenSize: 4096, numHeads: 32, numLayers: 32, numKvHeads: 'H', theta: 10000, eps: 1e-6, maxPositions: 2048 },
  mistral: { hiddenSize: 4096, numHeads: 32, numLayers: 32, numKvHeads: 8, theta: 10000, eps: 1e-6, slidingWindow: 4096, maxPositions: 4096 * 32 },
  qwen2: { hiddenSize: 4096, numHeads: 32, numLayers: 32, numKvHeads: 32, theta: 10000, eps: 1e-6, slidingWindow: 4096, maxPositions: 32768 },
  qwen3: { hiddenSize: 4096, numHeads: 32, numLayers: 32, headDim: 128, numKvHeads: 32, theta: 10000, eps: 1e-6, slidingWindow: 4096, maxPositions: 32768 },
  qwen3_next: { hiddenSize: 2048, numHeads: 16, numLayers: 48, headDim: 256, numKvHeads: 2, theta: 10000, eps: 1e-6, partial: 0.25, maxPositions: 32768 },
  qwen3_5: { hiddenSize: 4096, numHeads: 16, numLayers: 32, headDim: 256, numKvHeads: 4, theta: 10000, eps: 1e-6, partial: 0.25, maxPositions: 32768 },
  gemma: { hiddenSize: 3072, numHeads: 16, numLayers: 28, headDim: 256, numKvHeads: 16, theta: 10000, eps: 1e-6, maxPositions: 8192 },
  gemma2: { hiddenSize: 2304, numHeads: 8, numLayers: 26, headDim: 256, numKvHeads: 4, theta: 10000, eps: 1e-6, slidingWindow: 4096, maxPositions: 8192 },
  gemma3: {
    hiddenSize: 2304,
    numHeads: 8,
    numLayers: 26,
    headDim: 256,
    numKvHeads: 4,
    theta: 1e6,
    eps: 1e-6,
    slidingWindow: 4096,
    perLayerTypeRope: true,
    maxPositions: 131072,
  },
  gemma4: {
    hiddenSize: 2304,
    numHeads: 8,
    numLayers: 30,
    headDim: 256,
    numKvHeads: 4,
    theta: 100,
    eps: 1e-6,
    slidingWindow: 512,
    perLayerTypeRope: true,
    maxPositions: 131072,
  },
  gpt_oss: { hiddenSize: 2880, numHeads: 64, numLayers: 36, headDim: 64, numKvHeads: 8, theta: 150000, eps: 1e-5, slidingWindow: 128, maxPositions: 131072 },
  smollm3: { hiddenSize: 2048, numHeads: 16, numLayers: 36, numKvHeads: 4, theta: 2e6, eps: 1e-6, slidingWindow: null, maxPositions: 32768 },
  phi3: { hiddenSize: 3072, numHeads: 32, numLayers: 32, numKvHeads: 'H', theta: 10000, eps: 1e-5, slidingWindow: null, maxPositions: 4096 },
  olmo2: { hiddenSize: 4096, numHeads: 32, numLayers: 32, numKvHeads: 'H', theta: 10000, eps: 1e-5, maxPositions: 2048 },
  olmo3: { hiddenSize: 4096, numHeads: 32, numLayers: 32, numKvHeads: 'H', theta: 500000, eps: 1e-5, slidingWindow: 4096, perLayerTypeRope: true, maxPositions: 2048 },
};

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
export const present = (v: unknown) => v !== undefined && v !== null;

export function bad(argument: string, expected: string, given: unknown, fix?: string): InvalidArgumentError {
  return new InvalidArgumentError({
    where: WHERE,
    argument,
    expected,
    given: given === undefined ? 'nothing' : JSON.stringify(given),
    fix: fix ?? 'Pass the model repository’s config.json unchanged (the object or its text).',
  });
}

export function gemma4Sizes(text: Json, L: number, type: string, G: number, Dh: number): { G: number; Dh: number } {
  const per = isObject(text.per_layer_config) ? text.per_layer_config : undefined;
  if (per) {
    // Keys are layer indices as text, zero-padded to the widest one when transformers writes them
    // ("04" … "34": heterogeneity/configuration_utils.py reads them back with int()).
    const key = Object.keys(per).find((k) => /^\d+$/.test(k) && Number(k) === L);
    const o = (key === undefined ? undefined : per[key]) ?? per[type];
    if (isObject(o)) {
      return {
        G: present(o.num_key_value_heads) ? Number(o.num_key_value_heads) : G,
        Dh: present(o.head_dim) ? Number(o.head_dim) : Dh,
      };
    }
    return { G, Dh };
  }
  if (type !== 'full_attention') return { G, Dh };
  const kEqV = text.attention_k_eq_v === true;
  return {
    Dh: present(text.global_head_dim) ? Number(text.global_head_dim) : 512,
    G: kEqV && present(text.num_global_key_value_heads) ? Number(text.num_global_key_value_heads) : G,
  };
}

export function layerTypesOf(family: string, text: Json, n: number): string[] {
  const given = text.layer_types;
  if (Array.isArray(given)) {
    if (given.length !== n || !given.every((t) => typeof t === 'string')) {
      throw bad('config.layer_types', `${n} strings (num_hidden_layers)`, given.length === n ? given : `${given.length} entries`);
    }
    const types = [...(given as string[])];
    if (family === 'gemma4') types[n - 1] = 'full_attention'; // Gemma4TextConfig forces the last layer full
    return types;
  }
  const range = Array.from({ length: n }, (_, i) => i);
  switch (family) {
    case 'qwen2':
    case 'qwen3': {
      const sw = text.use_sliding_window === true ? (text.sliding_window === undefined ? 4096 : text.sliding_window) : null;
      const maxWindowLayers = present(text.max_window_layers) ? Number(text.max_window_layers) : 28;
      return range.map((i) => (present(sw) && i >= maxWindowLayers ? 'sliding_attention' : 'full_attention'));
    }
    case 'qwen3_next':
    case 'qwen3_5': {
      const k = present(text.full_attention_interval) ? Number(text.full_attention_interval) : 4;
      return range.map((i) => ((i + 1) % k ? 'linear_attention' : 'full_attention'));
    }
    case 'gemma2':
    case 'gpt_oss':
      return range.map((i) => ((i + 1) % 2 ? 'sliding_attention' : 'full_attention'));
    case 'gemma3':
    case 'gemma4': {
      const k = family === 'gemma3' && present(text.sliding_window_pattern) ? Number(text.sliding_window_pattern) : 6;
      const types = range.map((i) => ((i + 1) % k ? 'sliding_attention' : 'full_attention'));
      if (family === 'gemma4') types[n - 1] = 'full_attention';
      return types;
    }
    case 'olmo3':
      return range.map((i) => ((i + 1) % 4 ? 'sliding_attention' : 'full_attention'));
    case 'smollm3': {
      const flags = noRopeLayers(text, n);
      const sw = text.use_sliding_window === true && present(text.sliding_window);
      return range.map((i) => (sw && !flags[i] ? 'sliding_attention' : 'full_attention'));
    }
    default:
      return range.map(() => 'full_attention');
  }
}

/** SmolLM3's no_rope_layers: 1 = rotate, 0 = NoPE; default every no_rope_layer_interval-th layer is NoPE. */
export function noRopeLayers(text: Json, n: number): number[] {
  const given = text.no_rope_layers;
  if (Array.isArray(given)) {
    if (given.length < n) throw bad('config.no_rope_layers', `${n} flags (num_hidden_layers)`, `${given.length} entries`);
    return given.map((x) => Number(x));
  }
  const k = present(text.no_rope_layer_interval) ? Number(text.no_rope_layer_interval) : 4;
  return Array.from({ length: n }, (_, i) => ((i + 1) % k !== 0 ? 1 : 0));
}

/** The layer's rope parameters after transformers' convert_rope_params_to_dict and standardize_rope_params. */
export function ropeParams(family: string, text: Json, d: FamilyDefaults, type: string): { params: RopeParameters; truncate: boolean } {
  const rp = text.rope_parameters;
  const scaling = isObject(text.rope_scaling) ? text.rope_scaling : undefined;
  const theta = present(text.rope_theta) ? Number(text.rope_theta) : undefined;
  if (d.perLayerTypeRope) {
    const nested = isObject(rp) && (isObject(rp.full_attention) || isObject(rp.sliding_attention));
    if (isObject(rp) && !nested && Object.keys(rp).length > 0) {
      throw new UnsupportedError({
        where: WHERE,
        argument: 'config.rope_parameters',
        expected: `rope parameters per layer type ({ full_attention: {…}, sliding_attention: {…} }), as ${family} has them`,
        given: JSON.stringify(rp).slice(0, 120),
        fix: 'Take config.json from the model repository unchanged.',
      });
    }
    let params: Json;
    if (family === 'gemma4') {
      const defaults: Record<string, Json> = {
        sliding_attention: { rope_type: 'default', rope_theta: 10000 },
        full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1e6 },
      };
      params = { ...((nested ? (rp as Json)[type] : defaults[type]) as Json) };
      if (!present(params.rope_theta) && present(theta)) params.rope_theta = theta;
    } else {
      const full: Json = { rope_type: 'default', ...(nested && isObject((rp as Json).full_attention) ? ((rp as Json).full_attention as Json) : {}) };
      const slide: Json = { rope_type: 'default', ...(nested && isObject((rp as Json).sliding_attention) ? ((rp as Json).sliding_attention as Json) : {}) };
      if (scaling) Object.assign(full, scaling);
      if (family === 'gemma3') {
        if (!present(full.rope_theta)) full.rope_theta = theta ?? 1e6;
        if (!present(slide.rope_theta)) slide.rope_theta = present(text.rope_local_base_freq) ? Number(text.rope_local_base_freq) : 10000;
      } else {
        // Olmo3Config pops rope_theta for full_attention, so sliding_attention falls back to the default theta.
        if (!present(full.rope_theta)) full.rope_theta = theta ?? d.theta;
        if (!present(slide.rope_theta)) slide.rope_theta = d.theta;
      }
      params = type === 'full_attention' ? full : slide;
    }
    if (!present(params.rope_type)) params.rope_type = params.type ?? 'default';
    return { params, truncate: true };
  }
  // GptOssConfig's rope when config.json gives none: YaRN ×32 over 4096 positions, truncate false.
  const familyDefault: Json =
    family === 'gpt_oss' ? { rope_type: 'yarn', factor: 32, beta_fast: 32, beta_slow: 1, truncate: false, original_max_position_embeddings: 4096 } : {};
  const params: Json = { ...(scaling ?? (isObject(rp) ? rp : familyDefault)) };
  if (!present(params.rope_type)) params.rope_type = params.type ?? 'default';
  if (!present(params.rope_theta)) params.rope_theta = theta ?? d.theta;
  if (!present(params.partial_rotary_factor) && present(text.partial_rotary_factor)) params.partial_rotary_factor = text.partial_rotary_factor;
  if (['llama3', 'yarn', 'longrope'].includes(String(params.rope_type))) {
    if (present(text.original_max_position_embeddings)) params.original_max_position_embeddings = text.original_max_position_embeddings;
    else if (family === 'phi3') params.original_max_position_embeddings = 4096;
  }
  return { params, truncate: params.truncate === undefined ? true : params.truncate === true };
}

export function ropeOf(
  family: string,
  architecture: string,
  text: Json,
  d: FamilyDefaults,
  L: number,
  type: string,
  Dh: number,
  maxPositionEmbeddings: number,
  maxPositions: number | undefined,
): HfRope {
  const { params, truncate } = ropeParams(family, text, d, type);
  let ropeType = String(params.rope_type);
  if (family === 'phi3') {
    // Phi3Config: 'su' and 'yarn' mean longrope; only default and longrope are valid.
    if (ropeType === 'su' || ropeType === 'yarn') ropeType = 'longrope';
    if (ropeType !== 'default' && ropeType !== 'longrope') {
      throw new UnsupportedError({
        where: WHERE,
        argument: `rope_type of layer ${L} (${architecture})`,
        expected: "'default' or 'longrope' (Phi3Config refuses the others)",
        given: JSON.stringify(ropeType),
      });
    }
    params.rope_type = ropeType;
  }
  // Partial rotary: Phi-3, Qwen3-Next and Qwen3.5 read partial_rotary_factor; Gemma 4's proportional rope
  // has its own. Elsewhere transformers' default rope ignores it while its scaled ropes would not: refuse.
  let partial = present(params.partial_rotary_factor) ? Number(params.partial_rotary_factor) : (d.partial ?? 1);
  const readsPartial = family === 'phi3' || family === 'qwen3_next' || family === 'qwen3_5' || ropeType === 'proportional';
  if (!readsPartial && partial !== 1) {
    throw new UnsupportedError({
      where: WHERE,
      argument: `partial_rotary_factor of layer ${L} (${architecture})`,
      expected: `1: ${family}'s rotary rotates the whole head`,
      given: String(partial),
      fix: 'Remove partial_rotary_factor from the config, or check the model type.',
    });
  }
  if (family === 'phi3') partial = present(params.partial_rotary_factor) ? Number(params.partial_rotary_factor) : 1;
  // The rope's head size is the config's head_dim (defaulted as the family does; Gemma 4: the layer's).
  return hfRope(params, {
    where: WHERE,
    architecture,
    layer: L,
    headDim: Dh,
    partial,
    maxPositionEmbeddings,
    maxPositions,
    truncate,
  });
}
