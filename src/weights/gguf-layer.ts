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
import type { MultiHeadAttentionConfig, RotaryOptions } from '../types.ts';
import { describe } from '../validate.ts';
import { describeValue } from './gguf-header.ts';
import { type GgufFile, type GgufTensor, parseGguf } from './gguf.ts';
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
   * For rope scaling (a `rope_freqs.weight` tensor, Llama 3.1+, or `{arch}.rope.scaling.type` 'linear'):
   * the positions to make the cos/sin tables for (config.rotary.cos/sin [maxPositions, dim/2]).
   */
  maxPositions?: number;
}

/** attentionLayerFromGguf's result: createMultiHeadAttention's two arguments, and how to call forward. */
export interface GgufAttentionLayer {
  config: MultiHeadAttentionConfig;
  stateDict: GgufStateDict;
  /** `general.architecture`. */
  architecture: string;
  /** Forward options the model's layers need: causal decoders (plus `scale`/`softcap` where the file gives them). */
  forward: { isCausal: true; scale?: number; softcap?: number };
}

/** Architectures llama.cpp runs with LLAMA_ROPE_TYPE_NORM (adjacent pairs) — llama_model_rope_type. */
const ROPE_NORM = new Set(
  'llama llama4 deci baichuan starcoder internlm2 minicpm xverse command-r cohere2 olmo arctic deepseek deepseek2 plm chatglm granite granitemoe granitehybrid chameleon solar bailingmoe neo-bert smollm3 arcee ernie4_5 ernie4_5-moe mistral3 llada'.split(
    ' ',
  ),
);
/** … with LLAMA_ROPE_TYPE_NEOX (halves). */
const ROPE_NEOX = new Set(
  'falcon falcon-h1 grok dbrx bert jina-bert-v3 nomic-bert nomic-bert-moe stablelm bitnet qwen qwen2 dream qwen2moe qwen3 qwen3moe llada-moe rnd1 olmo2 olmoe phi2 phi3 phimoe plamo plamo2 gemma gemma2 gemma3 gemma3n gemma-embedding starcoder2 openelm gptneox codeshell orion nemotron exaone exaone4 minicpm3 bailingmoe2 dots1 hunyuan-moe gpt-oss hunyuan-dense lfm2 lfm2moe smallthinker seed_oss grovemoe apertus minimax-m2 cogvlm pangu-embedded afmoe qwen3next mimo2'.split(
    ' ',
  ),
);
/** … without rope (no rotary). */
const ROPE_NONE = new Set('gpt2 gptj mpt refact bloom jina-bert-v2 jais'.split(' '));

const WHERE = 'attentionLayerFromGguf';

/**
 * The config and state_dict of attention layer `options.layer` of a GGUF model (see the table at the
 * top of src/weights/gguf-layer.ts), weights in the file's types. The layers are causal decoders with
 * positions from 0: call forward with `isCausal: true` (result.forward). Throws UnsupportedError for
 * what the engine does not run (a head size other than E/H, a norm over all heads, YaRN, M-RoPE),
 * InvalidArgumentError for a layer past block_count, MissingWeightError / ShapeMismatchError /
 * WeightFileError for the file's tensors.
 */
export async function attentionLayerFromGguf(file: GgufFile | ArrayBuffer | Uint8Array, options: GgufLayerOptions): Promise<GgufAttentionLayer> {
  const f = file instanceof ArrayBuffer || file instanceof Uint8Array ? parseGguf(file) : file;
  if (typeof f !== 'object' || f === null || !(f.metadata instanceof Map) || !(f.tensors instanceof Map)) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'file',
      expected: 'a GgufFile (from loadGguf or parseGguf) or the bytes of a .gguf file',
      given: describe(file),
      fix: 'Pass await loadGguf(source) for a Blob, a Response, a URL or a path.',
    });
  }
  const { layer } = options ?? ({} as GgufLayerOptions);
  const archValue = f.metadata.get('general.architecture');
  if (typeof archValue !== 'string') {
    throw new WeightFileError({
      where: WHERE,
      argument: 'metadata key "general.architecture"',
      expected: 'a string (llama, qwen2, …)',
      given: describeValue(archValue),
      fix: 'This file does not describe a model; convert the model with llama.cpp.',
      problem: 'header',
    });
  }
  const arch = archValue;
  const key = (k: string) => `${arch}.${k}`;
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
  const blocks = f.metadata.has(key('block_count')) ? num('block_count') : countBlocks(f);
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
  if (G === 0) {
    throw new UnsupportedError({
      where: WHERE,
      argument: `layer ${layer}`,
      expected: 'an attention layer',
      given: `${key('attention.head_count_kv')} = 0 for it (a recurrent or state-space block of a hybrid model)`,
      fix: 'Pick a layer whose head_count_kv is not 0.',
    });
  }
  for (const k of ['attention.key_length', 'attention.value_length']) {
    const length = num(k, E / H);
    if (length * H !== E || E % H !== 0) {
      throw new UnsupportedError({
        where: WHERE,
        argument: `metadata key "${key(k)}"`,
        expected: `the head size embedding_length / head_count = ${E} / ${H}${E % H ? '' : ` = ${E / H}`}`,
        given: String(length),
        fix: 'This engine takes heads of size E/H only (E = H·Dh); this model (Gemma-style) has a head size of its own.',
      });
    }
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
  const Dh = E / H;
  const config: MultiHeadAttentionConfig = { embedDim: E, numHeads: H };
  if (G !== H) config.numKvHeads = G;
  const rotary = ropesAt(arch, layer) ? await rotaryOf(f, arch, Dh, options, num) : undefined;
  if (rotary) config.rotary = rotary;

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
  const read = async (suffix: string, shape: number[]) => {
    const info = f.tensors.get(t(suffix))!;
    const dims = [...info.dims];
    while (dims.length > shape.length && dims[dims.length - 1] === 1) dims.pop();
    const given = [...dims].reverse();
    if (given.length !== shape.length || given.some((d, i) => d !== shape[i])) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument: `tensor "${t(suffix)}"`,
        expected: `of shape [${shape.join(', ')}] (ne [${[...shape].reverse().join(', ')}]) for E = ${E}, H = ${H}, G = ${G}, Dh = ${Dh}`,
        given: `shape [${given.join(', ')}] (ne [${info.dims.join(', ')}])`,
        fix: `The metadata (${key('embedding_length')}, ${key('attention.head_count')}, ${key('attention.head_count_kv')}) and this tensor disagree: the file is damaged or of an architecture laid out otherwise.`,
      });
    }
    return f.tensor(t(suffix));
  };
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

  if (has('attn_q_norm.weight') || has('attn_k_norm.weight')) {
    for (const s of ['attn_q_norm.weight', 'attn_k_norm.weight']) {
      if (!has(s)) throw missing(s, 'present, as its query/key twin is (QK-norm)');
      const n = f.tensors.get(t(s))!.dims.reduce((a, b) => a * b, 1);
      if (n !== Dh) {
        throw new UnsupportedError({
          where: WHERE,
          argument: `tensor "${t(s)}"`,
          expected: `a norm of each head, [Dh = ${Dh}] (Qwen3, Gemma 3)`,
          given: `${n} weights${n === (s.startsWith('attn_q') ? H : G) * Dh ? ' (a norm over all heads at once, as OLMo 2 has)' : ''}`,
          fix: 'This engine applies QK-norm per head only.',
        });
      }
    }
    config.qkNorm = {
      query: await float('attn_q_norm.weight', Dh),
      key: await float('attn_k_norm.weight', Dh),
      eps: num('attention.layer_norm_rms_epsilon', 1e-6),
    };
  }
  const forward: GgufAttentionLayer['forward'] = { isCausal: true };
  if (f.metadata.has(key('attention.scale'))) forward.scale = num('attention.scale');
  if (f.metadata.has(key('attn_logit_softcapping'))) forward.softcap = num('attn_logit_softcapping');
  return { config, stateDict, architecture: arch, forward };
}

/**
 * Whether llama.cpp rotates layer `layer`'s queries and keys. SmolLM3 leaves every 4th layer without
 * rope (NoPE), and nothing in the file says so: llama.cpp hard-codes it. src/llama-model.cpp,
 * LLM_ARCH_SMOLLM3 in load_hparams: `hparams.n_no_rope_layer_step = 4;`, and src/models/smollm3.cpp:
 * `const bool use_rope = (il + 1) % hparams.n_no_rope_layer_step != 0;` (ggml_rope_ext on Qcur and
 * Kcur only when use_rope).
 */
function ropesAt(arch: string, layer: number): boolean {
  if (arch === 'smollm3') return (layer + 1) % SMOLLM3_NO_ROPE_STEP !== 0;
  return true;
}
const SMOLLM3_NO_ROPE_STEP = 4;

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

async function rotaryOf(
  f: GgufFile,
  arch: string,
  Dh: number,
  options: GgufLayerOptions,
  num: (k: string, fallback?: number) => number,
): Promise<RotaryOptions | undefined> {
  const unsupported = (argument: string, given: string, fix: string) =>
    new UnsupportedError({ where: WHERE, argument, expected: 'rotary embeddings this reader can describe (llama.cpp normal or NEOX rope)', given, fix });
  let interleaved = options.interleaved;
  if (interleaved === undefined) {
    if (ROPE_NONE.has(arch)) return undefined;
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
  const dim = num('rope.dimension_count', Dh);
  const base = num('rope.freq_base', 10000);
  const rotary: RotaryOptions = { dim, base, interleaved };
  const scalingKey = `${arch}.rope.scaling.type`;
  const scaling = f.metadata.get(scalingKey);
  const linear = scaling === 'linear' ? num('rope.scaling.factor', 1) : num('rope.scale_linear', 1);
  if (scaling !== undefined && scaling !== 'none' && scaling !== 'linear') {
    throw unsupported(
      `metadata key "${scalingKey}"`,
      JSON.stringify(scaling),
      'Only linear rope scaling is read; give config.rotary.cos/sin tables of your own for this one.',
    );
  }
  const freqs = f.tensors.has('rope_freqs.weight') ? 'rope_freqs.weight' : undefined;
  if (linear === 1 && !freqs) return rotary;
  if (!Number.isInteger(options.maxPositions) || (options.maxPositions as number) <= 0) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.maxPositions',
      expected: `a positive integer: this model scales its rope (${freqs ? `tensor "${freqs}"` : `linear factor ${linear}`}), so its angles come as cos/sin tables`,
      given: String(options.maxPositions),
      fix: 'Pass { maxPositions } (the longest sequence plus KV cache you will run).',
    });
  }
  return { ...rotary, ...(await ropeTables(f, freqs, options.maxPositions as number, dim, base, linear)) };
}

/** rotary cos/sin [P, dim/2] as ggml's rope computes them: angle = p · base^(−2i/dim) / factor / freq_i. */
async function ropeTables(f: GgufFile, freqs: string | undefined, P: number, dim: number, base: number, linear: number) {
  const half = dim / 2;
  const factors = freqs ? asFloat(freqs, await f.tensor(freqs)) : undefined;
  if (factors && factors.length !== half) {
    throw new ShapeMismatchError({
      where: WHERE,
      argument: `tensor "${freqs}"`,
      expected: `${half} frequency factors (rope dim / 2)`,
      given: `${factors.length}`,
      fix: 'The file is damaged or its rope.dimension_count is wrong.',
    });
  }
  const cos = new Float32Array(P * half);
  const sin = new Float32Array(P * half);
  for (let i = 0; i < half; i++) {
    const theta = base ** (-(2 * i) / dim) / linear / (factors ? factors[i] : 1);
    for (let p = 0; p < P; p++) {
      cos[p * half + i] = Math.cos(p * theta);
      sin[p * half + i] = Math.sin(p * theta);
    }
  }
  return { cos, sin };
}
