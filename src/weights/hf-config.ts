// A Hugging Face config.json read as each family's transformers code reads it (transformers 5.18:
// models/<family>/configuration_*.py and modeling_*.py): per layer, what its attention computes. Both
// spellings: transformers 4 (rope_theta, rope_scaling, rope_local_base_freq, partial_rotary_factor at the
// top) and transformers 5 (rope_parameters, per layer type where the family has them). Absent keys take
// the family's config-class defaults (Qwen3's head_dim 128, Mistral's sliding_window 4096, …).

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';
import { CONFIG_KEYS, QK_NORM_KEYS } from '../option-keys.ts';
import { type HfRope, type RopeParameters, hfRope } from './hf-rope.ts';
import type { ModelLayer } from './model-layers.ts';

export const WHERE = 'attentionLayerFromHf';

type Json = Record<string, unknown>;

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

/** model_type → family. */
const FAMILIES: Record<string, string> = {
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
interface FamilyDefaults {
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
const DEFAULTS: Record<string, FamilyDefaults> = {
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

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

function bad(argument: string, expected: string, given: unknown, fix?: string): InvalidArgumentError {
  return new InvalidArgumentError({
    where: WHERE,
    argument,
    expected,
    given: given === undefined ? 'nothing' : JSON.stringify(given),
    fix: fix ?? 'Pass the model repository’s config.json unchanged (the object or its text).',
  });
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

function gemma4Sizes(text: Json, L: number, type: string, G: number, Dh: number): { G: number; Dh: number } {
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

function layerTypesOf(family: string, text: Json, n: number): string[] {
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
function noRopeLayers(text: Json, n: number): number[] {
  const given = text.no_rope_layers;
  if (Array.isArray(given)) {
    if (given.length < n) throw bad('config.no_rope_layers', `${n} flags (num_hidden_layers)`, `${given.length} entries`);
    return given.map((x) => Number(x));
  }
  const k = present(text.no_rope_layer_interval) ? Number(text.no_rope_layer_interval) : 4;
  return Array.from({ length: n }, (_, i) => ((i + 1) % k !== 0 ? 1 : 0));
}

/** The layer's rope parameters after transformers' convert_rope_params_to_dict and standardize_rope_params. */
function ropeParams(family: string, text: Json, d: FamilyDefaults, type: string): { params: RopeParameters; truncate: boolean } {
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

function ropeOf(
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
