// A Hugging Face config.json read as each family's transformers code reads it (transformers 5.18:
// models/<family>/configuration_*.py and modeling_*.py): per layer, what its attention computes. Both
// spellings: transformers 4 (rope_theta, rope_scaling, rope_local_base_freq, partial_rotary_factor at the
// top) and transformers 5 (rope_parameters, per layer type where the family has them). Absent keys take
// the family's config-class defaults (Qwen3's head_dim 128, Mistral's sliding_window 4096, …).

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';
import { CONFIG_KEYS, QK_NORM_KEYS } from '../option-keys.ts';
import type { HfRope } from './hf-rope.ts';
import type { ModelLayer } from './model-layers.ts';

import { DEFAULTS, FAMILIES, HF_FAMILIES, type Json, WHERE, bad, gemma4Sizes, isObject, layerTypesOf, noRopeLayers, present, ropeOf } from './hf-family.ts';

export { HF_FAMILIES, WHERE } from './hf-family.ts';

/** What one attention layer computes, as its family's modeling code does. */
export interface HfLayerPlan {
  architecture: string;
  family: string;
  layer: ModelLayer;
  E: number;
  H: number;
  G: number;
  Dh: number;
  /** q/k/v biases and the output bias (Qwen2: q/k/v only). */
  qkvBias: boolean;
  outBias: boolean;
  /** Phi-3's fused qkv_proj. */
  fusedQkv: boolean;
  /** QK-norm: per head ([Dh]) or over the whole projection ([H·Dh], [G·Dh], OLMo 2); null without. */
  qkNorm: 'head' | 'all' | null;
  /** The norm multiplies by (1 + weight) (Gemma 3, Qwen3-Next, Qwen3.5). */
  normPlusOne: boolean;
  eps: number;
  /** Gemma 4: a weightless RMS norm of V. */
  vNorm: boolean;
  /** Gemma 4 full layers with attention_k_eq_v: no v_proj, V is k_proj's output before k_norm. */
  keyIsValue: boolean;
  /** Qwen3-Next, Qwen3.5: q_proj rows [query_h, gate_h] per head; out = o_proj(attn ⊙ sigmoid(gate)). */
  outputGate: boolean;
  /** gpt-oss: learned sinks [H]. */
  sinks: boolean;
  scale: number | undefined;
  softcap: number | undefined;
  rope: HfRope | null;
  /** Why the loader refuses this layer (its text is layer.unsupported); null when it builds it. */
  refusal: UnsupportedError | null;
}

/**
 * Engine features of issue 39 that some families need and that land on other branches: a layer needing
 * one the engine lacks is refused (UnsupportedError) rather than handed to createMultiHeadAttention.
 */
export interface EngineFeatures {
  /** config.qkNorm.over 'all' (OLMo 2). */
  qkNormOverAll: boolean;
  /** config.vNorm (Gemma 4). */
  vNorm: boolean;
  /** config.kEqV (Gemma 4's K = V layers). */
  keyIsValue: boolean;
  /** config.outputGate with stateDict.gate_proj_weight (Qwen3-Next, Qwen3.5). */
  outputGate: boolean;
}

/** What this build's createMultiHeadAttention accepts (src/option-keys.ts). */
export const ENGINE_FEATURES: EngineFeatures = {
  qkNormOverAll: (QK_NORM_KEYS as readonly string[]).includes('over'),
  vNorm: (CONFIG_KEYS as readonly string[]).includes('vNorm'),
  keyIsValue: (CONFIG_KEYS as readonly string[]).includes('kEqV'),
  outputGate: (CONFIG_KEYS as readonly string[]).includes('outputGate'),
};

export interface ParsedHfConfig {
  architecture: string;
  family: string;
  text: Json;
  numLayers: number;
  /** config.layer_types as the family fills it in ('full_attention', 'sliding_attention', 'linear_attention'). */
  layerTypes: string[];
  /** The layer's plan, or throws UnsupportedError / InvalidArgumentError. */
  plan(layer: number, maxPositions: number | undefined, features?: EngineFeatures): HfLayerPlan;
}

/** Reads config.json (an object or its text): its family, its text model's config and the layer count. */
export function parseHfConfig(config: unknown): ParsedHfConfig {
  let root: unknown = config;
  if (typeof config === 'string') {
    try {
      root = JSON.parse(config);
    } catch (e) {
      throw bad('config', 'a config.json object or its JSON text', `${config.slice(0, 60)}… (${(e as Error).message})`);
    }
  }
  if (!isObject(root)) throw bad('config', 'a config.json object or its JSON text', typeof root === 'object' ? root : String(root));
  let text = root;
  const rootType = root.model_type;
  // Multimodal wrappers (Gemma 3/4, Qwen3.5): the text model's config is text_config.
  if (isObject(root.text_config) && (rootType === 'gemma3' || rootType === 'gemma4' || rootType === 'qwen3_5')) {
    text = { model_type: `${rootType}_text`, ...root.text_config };
  }
  const architecture = String(text.model_type ?? rootType);
  const family = typeof text.model_type === 'string' ? FAMILIES[text.model_type] : undefined;
  if (!family) {
    throw new UnsupportedError({
      where: WHERE,
      argument: 'config.model_type',
      expected: `one of the families this loader reads: ${HF_FAMILIES.join(', ')}`,
      given: JSON.stringify(text.model_type),
      fix: 'Use attentionLayerFromSafetensors with an explicit layout for another architecture.',
    });
  }
  const d = DEFAULTS[family];
  const int = (key: string, fallback?: number): number => {
    const v = text[key];
    if (!present(v)) {
      if (fallback !== undefined) return fallback;
      throw bad(`config.${key}`, 'a positive integer', v);
    }
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw bad(`config.${key}`, 'a positive integer', v);
    return v;
  };
  const numLayers = int('num_hidden_layers', d.numLayers);
  const E = int('hidden_size', d.hiddenSize);
  const H = int('num_attention_heads', d.numHeads);
  const G0 = int('num_key_value_heads', d.numKvHeads === 'H' ? H : d.numKvHeads);
  const Dh0 = int('head_dim', d.headDim ?? Math.floor(E / H));
  const eps = present(text.rms_norm_eps) ? Number(text.rms_norm_eps) : d.eps;
  const maxPositionEmbeddings = present(text.max_position_embeddings) ? Number(text.max_position_embeddings) : d.maxPositions;

  const layerTypes = layerTypesOf(family, text, numLayers);
  const slidingWindow = text.sliding_window === undefined ? d.slidingWindow : (text.sliding_window as number | null);
  const bool = (key: string, fallback: boolean) => (present(text[key]) ? text[key] === true : fallback);

  const build = (L: number, maxPositions: number | undefined, features: EngineFeatures): HfLayerPlan => {
    if (!Number.isInteger(L) || L < 0 || L >= numLayers) {
      throw new InvalidArgumentError({
        where: WHERE,
        argument: 'options.layer',
        expected: `an integer 0 … ${numLayers - 1} (num_hidden_layers = ${numLayers})`,
        given: String(L),
        fix: `Pass { layer } with a layer index below ${numLayers}.`,
      });
    }
    const type = layerTypes[L];
    let G = G0;
    let Dh = Dh0;
    // Gemma 4: full layers take global_head_dim (and num_global_key_value_heads with attention_k_eq_v).
    if (family === 'gemma4') ({ G, Dh } = gemma4Sizes(text, L, type, G0, Dh0));
    const p: HfLayerPlan = {
      architecture,
      family,
      layer: { layer: L, kind: 'full', rope: true, numHeads: H, numKvHeads: G, headDim: Dh, unsupported: null },
      E,
      H,
      G,
      Dh,
      qkvBias: false,
      outBias: false,
      fusedQkv: false,
      qkNorm: null,
      normPlusOne: false,
      eps,
      vNorm: false,
      keyIsValue: false,
      outputGate: false,
      sinks: false,
      scale: undefined,
      softcap: undefined,
      rope: null,
      refusal: null,
    };
    let window: number | undefined;
    const setWindow = () => {
      if (window === undefined) return;
      if (!Number.isInteger(window) || window <= 0) throw bad('config.sliding_window', 'a positive integer or null', window);
      p.layer.kind = 'sliding';
      p.layer.window = window;
    };
    const refuse = (what: string, fix: string) => {
      setWindow();
      return new Refusal(
        p,
        new UnsupportedError({
          where: WHERE,
          argument: `layer ${L} of ${architecture}`,
          expected: 'an attention layer this engine computes exactly as transformers does',
          given: what,
          fix,
        }),
      );
    };
    if (H % G !== 0) throw bad('config.num_key_value_heads', `a divisor of num_attention_heads ${H}`, G);
    const attentionBias = bool('attention_bias', family === 'gpt_oss');
    p.qkvBias = attentionBias;
    p.outBias = attentionBias;
    const sliding = type === 'sliding_attention';
    // Families whose attention reads layer_types: a type their code has no mask or module for is refused.
    const readsTypes = !['llama', 'mistral', 'gemma', 'phi3', 'olmo2'].includes(family);
    const known = family === 'qwen3_next' || family === 'qwen3_5' ? ['full_attention', 'linear_attention'] : ['full_attention', 'sliding_attention'];
    if (readsTypes && !known.includes(type)) {
      throw refuse(`layer_types[${L}] = ${JSON.stringify(type)}`, `${family} layers are ${known.join(' or ')}.`);
    }
    switch (family) {
      case 'llama':
        break;
      case 'mistral':
        p.qkvBias = p.outBias = false;
        if (present(slidingWindow)) window = slidingWindow as number;
        break;
      case 'qwen2':
      case 'qwen3': {
        if (family === 'qwen2') {
          p.qkvBias = true;
          p.outBias = false;
        } else p.qkNorm = 'head';
        const sw = bool('use_sliding_window', false) ? slidingWindow : null;
        if (sliding && present(sw)) window = sw as number;
        break;
      }
      case 'qwen3_next':
      case 'qwen3_5':
        if (type === 'linear_attention') {
          p.layer.kind = 'linear';
          p.layer.rope = false; // a gated delta net has no rotary
          throw refuse('a linear-attention layer (gated delta net)', 'Pick one of the full_attention layers (hfModelLayers lists them).');
        }
        p.qkNorm = 'head';
        p.normPlusOne = true;
        p.outputGate = true;
        break;
      case 'gemma':
      case 'gemma2':
      case 'gemma3':
      case 'gemma4': {
        const bidirectional = text.use_bidirectional_attention;
        if (family === 'gemma4' ? bidirectional === 'all' : bidirectional === true) {
          throw refuse('use_bidirectional_attention (not causal)', 'This loader builds causal decoder layers only.');
        }
        if (family !== 'gemma') {
          if (sliding && present(slidingWindow)) window = slidingWindow as number;
        }
        if (family === 'gemma2' || family === 'gemma3') {
          p.scale = (present(text.query_pre_attn_scalar) ? Number(text.query_pre_attn_scalar) : 256) ** -0.5;
        }
        // Gemma 2 soft-caps its scores; Gemma 3's attention keeps attn_logit_softcapping but never applies it.
        if (family === 'gemma2') {
          const cap = text.attn_logit_softcapping === undefined ? 50 : text.attn_logit_softcapping;
          if (present(cap)) p.softcap = Number(cap);
        }
        if (family === 'gemma3') {
          p.qkNorm = 'head';
          p.normPlusOne = true;
        }
        if (family === 'gemma4') {
          const shared = present(text.num_kv_shared_layers) ? Number(text.num_kv_shared_layers) : 0;
          if (L >= numLayers - shared) {
            throw refuse(
              `a KV-shared layer (num_kv_shared_layers = ${shared}: it reuses the keys and values of an earlier layer and has no k/v weights)`,
              `Pick a layer below ${numLayers - shared}.`,
            );
          }
          p.scale = 1;
          p.qkNorm = 'head';
          p.vNorm = true;
          p.keyIsValue = bool('attention_k_eq_v', false) && !sliding;
        }
        break;
      }
      case 'gpt_oss':
        p.sinks = true;
        if (sliding && present(slidingWindow)) window = slidingWindow as number;
        break;
      case 'smollm3': {
        const sw = bool('use_sliding_window', false) ? slidingWindow : null;
        if (sliding && present(sw)) window = sw as number;
        break;
      }
      case 'phi3':
        p.fusedQkv = true;
        p.qkvBias = p.outBias = false;
        if (present(slidingWindow)) window = slidingWindow as number;
        break;
      case 'olmo2':
      case 'olmo3':
        p.qkNorm = 'all';
        if (family === 'olmo3' && sliding && present(slidingWindow)) window = slidingWindow as number;
        break;
    }
    setWindow();
    // Rope: NoPE layers of SmolLM3; the rest rotate.
    let useRope = true;
    if (family === 'smollm3') {
      const flags = noRopeLayers(text, numLayers);
      useRope = flags[L] !== 0;
    }
    p.layer.rope = useRope;
    if (useRope) {
      try {
        p.rope = ropeOf(family, architecture, text, d, L, type, Dh, maxPositionEmbeddings, maxPositions);
      } catch (e) {
        if (e instanceof UnsupportedError) throw new Refusal(p, e);
        throw e;
      }
    }
    const missing: string[] = [];
    if (p.qkNorm === 'all' && !features.qkNormOverAll) missing.push("config.qkNorm.over 'all' (one RMS norm over the whole H·Dh / G·Dh projection)");
    if (p.vNorm && !features.vNorm) missing.push('config.vNorm (a weightless RMS norm of V)');
    if (p.keyIsValue && !features.keyIsValue) missing.push('config.kEqV (V is the k projection before the key norm)');
    if (p.outputGate && !features.outputGate) missing.push('config.outputGate (out = W_O·(attention ⊙ sigmoid(gate)))');
    if (missing.length) {
      throw refuse(
        `a layer needing what this engine build lacks: ${missing.join('; ')}`,
        "These come with issue 39's engine work; until this build has them the layer is refused rather than computed otherwise.",
      );
    }
    return p;
  };
  const plan = (L: number, maxPositions: number | undefined, features = ENGINE_FEATURES): HfLayerPlan => {
    try {
      return build(L, maxPositions, features);
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      e.plan.refusal = e.error;
      e.plan.layer.unsupported = e.error.message;
      return e.plan;
    }
  };
  return { architecture, family, text, numLayers, layerTypes, plan };
}

/** A layer refused: its plan so far (sizes, kind) and the error. */
class Refusal {
  constructor(
    readonly plan: HfLayerPlan,
    readonly error: UnsupportedError,
  ) {}
}
