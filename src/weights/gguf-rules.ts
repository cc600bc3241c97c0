// What llama.cpp does with one attention layer of a GGUF model beyond what the file's metadata says:
// the rules it hard-codes per architecture (sliding-window patterns, NoPE steps, Gemma's scale by model
// size, per-layer rope bases) and its rope as ggml computes it (src/ggml-cpu/ops.cpp rope_yarn), written
// as what this engine takes: rotary inverse frequencies and one attention factor, a window, a scale, a
// softcap. Each rule cites the llama.cpp source it follows (ggml-org/llama.cpp, src/llama-model.cpp's
// load_hparams unless said otherwise; src/models/<arch>.cpp for the graphs).

import { UnsupportedError } from '../errors.ts';
import type { RotaryOptions } from '../types.ts';

const WHERE = 'attentionLayerFromGguf';

/** Architectures llama.cpp runs with LLAMA_ROPE_TYPE_NORM (adjacent pairs) — llama_model_rope_type. */
export const ROPE_NORM = new Set(
  'llama llama4 deci baichuan starcoder internlm2 minicpm xverse command-r cohere2 olmo arctic deepseek deepseek2 plm chatglm granite granitemoe granitehybrid chameleon solar bailingmoe neo-bert smollm3 arcee ernie4_5 ernie4_5-moe mistral3 llada'.split(
    ' ',
  ),
);
/** … with LLAMA_ROPE_TYPE_NEOX (halves). */
export const ROPE_NEOX = new Set(
  'falcon falcon-h1 grok dbrx bert jina-bert-v3 nomic-bert nomic-bert-moe stablelm bitnet qwen qwen2 dream qwen2moe qwen3 qwen3moe llada-moe rnd1 olmo2 olmoe phi2 phi3 phimoe plamo plamo2 gemma gemma2 gemma3 gemma3n gemma-embedding starcoder2 openelm gptneox codeshell orion nemotron exaone exaone4 minicpm3 bailingmoe2 dots1 hunyuan-moe gpt-oss hunyuan-dense lfm2 lfm2moe smallthinker seed_oss grovemoe apertus minimax-m2 cogvlm pangu-embedded afmoe qwen3next mimo2'.split(
    ' ',
  ),
);
/** … without rope (no rotary). */
export const ROPE_NONE = new Set('gpt2 gptj mpt refact bloom jina-bert-v2 jais'.split(' '));

/**
 * Architectures whose attention llama.cpp runs with rules this reader does not implement: refused
 * rather than loaded as a plain layer that would compute something else.
 */
export const REFUSED: Record<string, string> = {
  llama4: 'NoPE every 4th layer, chunked attention and L2-normed queries/keys on the others, attention temperature on NoPE layers (src/models/llama4.cpp)',
  afmoe: 'NoPE layers and sliding-window patterns of its own (src/models/afmoe.cpp)',
  smallthinker: 'NoPE every 4th layer and sliding windows (src/models/smallthinker.cpp)',
  cohere2: 'sliding windows on 3 of every 4 layers and rope on those only (src/models/cohere2-iswa.cpp)',
  exaone4: 'sliding-window patterns with rope on the sliding layers only (src/models/exaone4.cpp)',
  gemma3n: 'per-layer inputs, KV sharing across layers and a V norm (src/models/gemma3n-iswa.cpp)',
  'gemma-embedding': 'bidirectional (non-causal) attention with a symmetric window',
  bert: 'bidirectional (non-causal) encoder attention',
  'nomic-bert': 'bidirectional (non-causal) encoder attention',
  'nomic-bert-moe': 'bidirectional (non-causal) encoder attention',
  'jina-bert-v2': 'bidirectional (non-causal) encoder attention with ALiBi',
  'jina-bert-v3': 'bidirectional (non-causal) encoder attention',
  'neo-bert': 'bidirectional (non-causal) encoder attention',
  dream: 'bidirectional (diffusion) attention',
  llada: 'bidirectional (diffusion) attention',
  'llada-moe': 'bidirectional (diffusion) attention',
  rnd1: 'bidirectional (diffusion) attention',
  deepseek2: 'multi-head latent attention (MLA)',
  minicpm3: 'multi-head latent attention (MLA)',
  plm: 'multi-head latent attention (MLA)',
  qwen3next: 'a gated attention output and linear-attention layers',
  grok: 'attention logit softcapping and output multipliers of its own (src/models/grok.cpp)',
  dbrx: 'clamped Q/K/V (f_clamp_kqv, src/models/dbrx.cpp)',
  chameleon: 'LayerNorm (not RMS) of queries and keys per head',
  stablelm: 'LayerNorm (not RMS) of queries and keys per head',
  mimo2: 'sliding-window patterns and attention sinks of its own (src/models/mimo2-iswa.cpp)',
  olmoe: 'a QK-norm over the whole projection (as OLMo 2 has), which this engine does not run yet',
  'minimax-m2': 'a QK-norm over the whole projection (as OLMo 2 has), which this engine does not run yet',
};

/** What llama.cpp does with one layer, from the header alone (no tensor read). */
export interface GgufLayerRules {
  /** Rope on this layer (false: NoPE). */
  rope: boolean;
  /** llama.cpp's rope base and frequency scale for this layer (per-layer for Gemma 3's sliding layers). */
  freqBase: number;
  freqScale: number;
  /** Sliding-window size (keys seen, its own included) when the layer is a sliding one. */
  window?: number;
  /** The scale of q·k when llama.cpp sets one other than 1/√Dh (Gemma 2/3: f_attention_scale). */
  scale?: number;
  /** Gemma 2's attention logit softcap. */
  softcap?: number;
}

type Num = (k: string, fallback?: number) => number;

/** Sliding-window layers as llama_hparams::set_swa_pattern(n) marks them: il % n < n − 1 (src/llama-hparams.cpp). */
const swaLayer = (layer: number, pattern: number) => layer % pattern < pattern - 1;

/**
 * The layer's llama.cpp rules. `has(k)` says whether metadata key `{arch}.k` is present, `num(k)` reads
 * it; `blocks` is block_count, `E`, `H`, `Dh` the sizes (Dh from attention.key_length).
 */
export function layerRules(arch: string, layer: number, blocks: number, E: number, H: number, Dh: number, num: Num, has: (k: string) => boolean): GgufLayerRules {
  const base = num('rope.freq_base', 10000);
  // load_hparams: rope_freq_scale_train = 1 / rope.scaling.factor (or the old rope.scale_linear), 1 if absent.
  const factor = has('rope.scaling.factor') ? num('rope.scaling.factor') : num('rope.scale_linear', 0);
  const rules: GgufLayerRules = { rope: true, freqBase: base, freqScale: factor === 0 ? 1 : 1 / factor };
  switch (arch) {
    case 'smollm3':
      // LLM_ARCH_SMOLLM3: `hparams.n_no_rope_layer_step = 4;`; src/models/smollm3.cpp:
      // `const bool use_rope = (il + 1) % hparams.n_no_rope_layer_step != 0;`. Nothing in the file says so.
      rules.rope = (layer + 1) % 4 !== 0;
      break;
    case 'gemma2': {
      // LLM_ARCH_GEMMA2: `hparams.n_swa = 4096; // default value of gemma 2`, set_swa_pattern(2) (even
      // layers slide), `attn_soft_cap = true` with f_attn_logit_softcapping (default 50, llama-hparams.h),
      // and the 27B rule for the scale (type 27B when n_layer == 46).
      if (swaLayer(layer, 2)) rules.window = num('attention.sliding_window', 4096);
      rules.softcap = num('attn_logit_softcapping', 50);
      rules.scale = gemmaScale(blocks === 46, E, H, Dh);
      break;
    }
    case 'gemma3': {
      // LLM_ARCH_GEMMA3: with attention.sliding_window > 0, LLAMA_SWA_TYPE_STANDARD and set_swa_pattern(6)
      // (5 of every 6 layers slide), `rope_freq_base_train_swa = 10000.0f; rope_freq_scale_train_swa = 1.0f;`
      // (global layers keep the file's base and linear factor); the 27B rule (n_layer == 62) for the scale.
      const window = num('attention.sliding_window', 0);
      if (window > 0 && swaLayer(layer, 6)) {
        rules.window = window;
        rules.freqBase = 10000;
        rules.freqScale = 1;
      }
      rules.scale = gemmaScale(blocks === 62, E, H, Dh);
      break;
    }
    case 'gpt-oss':
      // LLM_ARCH_OPENAI_MOE: `ml.get_key(LLM_KV_ATTENTION_SLIDING_WINDOW, hparams.n_swa);` (required),
      // LLAMA_SWA_TYPE_STANDARD, set_swa_pattern(2): even layers slide. Sinks: blk.N.attn_sinks (the loader).
      if (swaLayer(layer, 2)) rules.window = num('attention.sliding_window');
      break;
    default:
      // phi3's attention.sliding_window is not used: llama_model_phi3::load_arch_hparams, "Phi SWA is
      // currently disabled" (swa_type NONE, llama.cpp PR 13676). Nor is any other architecture's here.
      break;
  }
  return rules;
}

/**
 * Gemma 2/3's f_attention_scale: `type == LLM_TYPE_27B ? 1.0f / std::sqrt(float(hparams.n_embd /
 * hparams.n_head(0))) : 1.0f / std::sqrt(float(hparams.n_embd_head_k))` (integer division n_embd / n_head).
 */
function gemmaScale(is27B: boolean, E: number, H: number, Dh: number): number {
  return 1 / Math.sqrt(is27B ? Math.floor(E / H) : Dh);
}

/**
 * The layer's rotary as ggml rotates (ggml/src/ggml-cpu/ops.cpp, rope_yarn and its callers): pair i of
 * `dim` turns by p·θ_i with θ_extrap = base^(−2i/dim) / freq_factor_i (rope_freqs.weight),
 * θ_interp = freq_scale·θ_extrap, and with YaRN (ext_factor 1: llama-context.cpp sets
 * yarn_ext_factor = 1 for LLAMA_ROPE_SCALING_TYPE_YARN, 0 otherwise)
 *   θ = θ_interp·(1 − r_i) + θ_extrap·r_i,  r_i = rope_yarn_ramp(corr_dims, 2i) = 1 − clamp((i − lo) / max(0.001, hi − lo), 0, 1),
 *   cos and sin times mscale = attn_factor·(1 + 0.1·ln(1 / freq_scale)), attn_factor 1 (llama-context.cpp sets
 *   yarn_attn_factor = get_mscale(factor) and cancels it by 1 / (1 + 0.1·ln factor), llama.cpp PR 17945,
 *   without rope.scaling.yarn_log_multiplier; the loader refuses that key and the other YaRN overrides),
 * corr_dims from ggml_rope_yarn_corr_dims (ggml.c): lo = max(0, floor(d(β_fast))), hi = min(dim − 1, ceil(d(β_slow))),
 * d(β) = dim·ln(n_ctx_orig / (β·2π)) / (2·ln base). θ is p times a per-pair frequency, and mscale one
 * factor for all pairs: exactly `invFreq` and `attentionFactor` (no table; any position).
 * Note: ggml always floors/ceils the correction dims; transformers does so only with `truncate: true`
 * (gpt-oss's config says false), so a gpt-oss GGUF rotates as llama.cpp does, unlike transformers: for
 * gpt-oss-20b's sizes (dim 64, base 150000, factor 32, n_ctx_orig 4096) ggml's lo, hi are 8, 18 where
 * transformers has 8.09, 17.40, and pair frequencies differ by up to 43% (0.9 rad at position 4096).
 */
export function ggmlRotary(o: {
  dim: number;
  interleaved: boolean;
  base: number;
  freqScale: number;
  freqFactors?: Float32Array;
  yarn?: { nCtxOrig: number; betaFast: number; betaSlow: number };
}): RotaryOptions {
  const { dim, interleaved, base, freqScale, freqFactors, yarn } = o;
  const half = dim / 2;
  if (freqScale === 1 && !freqFactors && !yarn) return { dim, base, interleaved };
  const invFreq = new Float64Array(half);
  let lo = 0;
  let hi = 0;
  if (yarn) {
    const d = (beta: number) => (dim * Math.log(yarn.nCtxOrig / (beta * 2 * Math.PI))) / (2 * Math.log(base));
    lo = Math.max(0, Math.floor(d(yarn.betaFast)));
    hi = Math.min(dim - 1, Math.ceil(d(yarn.betaSlow)));
  }
  for (let i = 0; i < half; i++) {
    const extrap = base ** (-(2 * i) / dim) / (freqFactors ? freqFactors[i] : 1);
    const interp = freqScale * extrap;
    const r = yarn ? 1 - Math.min(1, Math.max(0, (i - lo) / Math.max(0.001, hi - lo))) : 0;
    invFreq[i] = interp * (1 - r) + extrap * r;
  }
  const rotary: RotaryOptions = { dim, interleaved, invFreq };
  if (yarn && freqScale !== 1) rotary.attentionFactor = 1 + 0.1 * Math.log(1 / freqScale);
  return rotary;
}

/** The UnsupportedError of an architecture in REFUSED. */
export function refusedArchitecture(arch: string, layer: number): UnsupportedError {
  return new UnsupportedError({
    where: WHERE,
    argument: 'metadata key "general.architecture"',
    expected: 'an architecture whose attention this reader runs as llama.cpp does',
    given: `${JSON.stringify(arch)} (layer ${layer}): llama.cpp runs it with ${REFUSED[arch]}`,
    fix: 'This engine would compute something else for it; no workaround here.',
  });
}
