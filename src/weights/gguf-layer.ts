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

import { MissingWeightError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import type { GgufQuantizedTensor } from '../quant/types.ts';
import type { MultiHeadAttentionConfig } from '../types.ts';
import type { GgufFile, GgufTensor } from './gguf.ts';
import { ggmlRotary } from './gguf-rules.ts';
import type { ModelLayer } from './model-layers.ts';
import { type GgufLayerOptions, type LayerPlan, WHERE, architectureOf, asGgufFile, blockCount, planLayer } from './gguf-plan.ts';

export type { GgufLayerOptions } from './gguf-plan.ts';

/** A state_dict whose projection weights may be GGUF block tensors; biases are float32. */
export type GgufStateDict = Record<string, Float32Array | GgufQuantizedTensor>;

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
