// createMultiHeadAttention's checks: a layer's sizes (LayerSpec) and its weights (LayerWeights).

import { InvalidArgumentError, MissingWeightError, UnsupportedError } from '../errors.ts';
import { CONFIG_KEYS } from '../option-keys.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireFloat32Array, requireObject, requirePositiveInteger } from '../validate.ts';
import { refuseDropout, resolveScoreMod } from './checks.ts';
import { resolveQkNorm, resolveRotary, resolveVNorm } from './head-transform.ts';
import { floatWeight } from '../quant/dequantize.ts';
import type { WeightTensor } from '../quant/types.ts';
import { checkQuantized, copyQuantized, sliceRows } from '../quant/validate.ts';
import type { FloatLayerWeights, LayerSpec, LayerWeights } from './types.ts';

export function resolveLayerSpec(config: unknown): LayerSpec {
  const where = 'createMultiHeadAttention';
  const c = requireObject(where, 'config', config, 'Pass { embedDim, numHeads }.');
  rejectUnknownKeys(where, 'config', c, CONFIG_KEYS);
  const embedDim = requirePositiveInteger(where, 'config.embedDim', c.embedDim);
  const numHeads = requirePositiveInteger(where, 'config.numHeads', c.numHeads);
  const givenHeadDim = c.headDim === undefined ? undefined : requirePositiveInteger(where, 'config.headDim', c.headDim);
  if (givenHeadDim === undefined && embedDim % numHeads !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'config.embedDim',
      expected: `divisible by numHeads (${numHeads})`,
      given: String(embedDim),
      fix: 'Each head gets embedDim / numHeads channels; choose sizes that divide, or give config.headDim.',
    });
  }
  const numKvHeads = c.numKvHeads === undefined ? numHeads : requirePositiveInteger(where, 'config.numKvHeads', c.numKvHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'config.numKvHeads',
      expected: `a divisor of numHeads (${numHeads})`,
      given: String(numKvHeads),
      fix: 'Each key/value head serves numHeads / numKvHeads query heads.',
    });
  }
  const kdim = c.kdim === undefined ? embedDim : requirePositiveInteger(where, 'config.kdim', c.kdim);
  const vdim = c.vdim === undefined ? embedDim : requirePositiveInteger(where, 'config.vdim', c.vdim);
  const bias = c.bias === undefined ? true : requireBoolean(where, 'config.bias', c.bias);
  refuseDropout(where, 'config.dropout', c.dropout);
  // H·Dh may differ from E when headDim is given (Qwen3, Gemma 3, gpt-oss).
  const headDim = givenHeadDim ?? embedDim / numHeads;
  const attention = resolveAttentionKind(where, c.attention);
  const scoreMod = resolveScoreMod(where, 'config.scoreMod', c.scoreMod);
  if (attention === 'linear' && scoreMod) {
    throw new UnsupportedError({
      where,
      argument: 'config.scoreMod',
      expected: "left out with config.attention = 'linear'",
      given: 'a scoreMod',
      fix: 'A score modification changes softmax scores; linear attention forms none.',
    });
  }
  return {
    embedDim,
    numHeads,
    numKvHeads,
    headDim,
    kdim,
    vdim,
    bias,
    rotary: resolveRotary(where, c.rotary, headDim),
    qkNorm: resolveQkNorm(where, c.qkNorm, headDim, numHeads, numKvHeads),
    vNorm: resolveVNorm(where, c.vNorm, headDim),
    kEqV: resolveKEqV(where, c.kEqV, kdim, vdim),
    outputGate: c.outputGate === undefined ? false : requireBoolean(where, 'config.outputGate', c.outputGate),
    scoreMod,
    attention,
    activations: resolveActivations(where, c.activations),
  };
}

/** config.activations: 'f32' (default) or 'q8'; whether the weights allow 'q8' is resolveWeights' check. */
function resolveActivations(where: string, value: unknown): 'f32' | 'q8' {
  if (value === undefined || value === 'f32' || value === 'q8') return value ?? 'f32';
  throw new InvalidArgumentError({
    where,
    argument: 'config.activations',
    expected: "'f32' (default: float inputs) or 'q8' (inputs quantized as ggml's Q8_0, integer dot products)",
    given: describe(value),
    fix: "Leave it out, or pass 'q8' for llama.cpp's arithmetic on a layer with quantized weights.",
  });
}

/** config.kEqV: a boolean, and only where V's input can be K's (vdim = kdim). */
function resolveKEqV(where: string, value: unknown, kdim: number, vdim: number): boolean {
  const kEqV = value === undefined ? false : requireBoolean(where, 'config.kEqV', value);
  if (kEqV && kdim !== vdim) {
    throw new InvalidArgumentError({
      where,
      argument: 'config.vdim',
      expected: `the same as kdim (${kdim}) with config.kEqV: the values are the keys' projection`,
      given: String(vdim),
      fix: 'Leave vdim out, or set it to kdim.',
    });
  }
  return kEqV;
}

/**
 * config.kEqV's state dict → the ordinary one: v_proj_weight = k_proj_weight (the same tensor), or
 * in_proj_weight [(H + G)·Dh, E] (and in_proj_bias [(H + G)·Dh]) extended by a copy of the k rows.
 * Entries of the wrong shape, and v weights, are refused here, naming the shapes of a K = V layer.
 */
function kEqVStateDict(where: string, spec: LayerSpec, sd: Record<string, unknown>): Record<string, unknown> {
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = spec;
  for (const name of ['v_proj_weight', 'v_proj_bias']) {
    if (sd[name] !== undefined) {
      throw new InvalidArgumentError({
        where,
        argument: `stateDict["${name}"]`,
        expected: 'left out: this layer has config.kEqV (its values are the key projection)',
        given: 'a v weight',
        fix: 'Leave out the v weights, or create the layer without kEqV.',
      });
    }
  }
  const out: Record<string, unknown> = { ...sd };
  const qk = (H + G) * Dh;
  if (sd.in_proj_weight !== undefined) {
    if (isQuantizedValue(sd.in_proj_weight)) {
      throw new UnsupportedError({
        where,
        argument: 'stateDict["in_proj_weight"]',
        expected: 'a Float32Array with config.kEqV',
        given: 'a quantized in_proj_weight',
        fix: 'Pass q_proj_weight and k_proj_weight apart (quantized is fine there).',
      });
    }
    const w = requireFloat32Array(
      where,
      'stateDict["in_proj_weight"]',
      sd.in_proj_weight,
      qk * E,
      `[(H + G)·headDim, E] = [${qk}, ${E}] = ${qk * E} (config.kEqV: q and k rows, no v)`,
    );
    const packed = new Float32Array((qk + G * Dh) * E);
    packed.set(w, 0);
    packed.set(w.subarray(H * Dh * E, qk * E), qk * E);
    out.in_proj_weight = packed;
  } else if (sd.k_proj_weight !== undefined) {
    out.v_proj_weight = sd.k_proj_weight;
  }
  if (spec.bias && sd.in_proj_bias === undefined) {
    throw new MissingWeightError({
      where,
      argument: 'stateDict["in_proj_bias"]',
      expected: `a Float32Array [(H + G)·headDim] = ${qk} (config.kEqV: q and k biases, no v)`,
      given: 'nothing',
      fix: 'Pass the q and k biases one after the other, or create the layer with bias: false.',
    });
  }
  if (spec.bias && sd.in_proj_bias !== undefined) {
    const b = requireFloat32Array(where, 'stateDict["in_proj_bias"]', sd.in_proj_bias, qk, `[(H + G)·headDim] = ${qk} (config.kEqV: q and k biases, no v)`);
    const packed = new Float32Array(qk + G * Dh);
    packed.set(b, 0);
    packed.set(b.subarray(H * Dh, qk), qk);
    out.in_proj_bias = packed;
  }
  return out;
}

function resolveAttentionKind(where: string, value: unknown): 'softmax' | 'linear' {
  if (value === undefined) return 'softmax';
  if (value === 'softmax' || value === 'linear') return value;
  throw new InvalidArgumentError({ where, argument: 'config.attention', expected: '"softmax" (default) or "linear"', given: describe(value) });
}

/**
 * The state_dict entries a layer takes, with their shapes; `separate` selects q/k/v_proj_weight.
 * `dims` names each size and spells it out, e.g. "[E, H·Dh] = [1024, 16·128]" (H·Dh may differ from E).
 */
export function expectedWeights(spec: LayerSpec, separate: boolean): { name: string; shape: number[]; dims: string }[] {
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = spec;
  const N = (H + 2 * G) * Dh;
  const n = `[(H + 2·G)·Dh] = [(${H} + 2·${G})·${Dh}]`;
  const entries = separate
    ? [
        { name: 'q_proj_weight', shape: [H * Dh, E], dims: `[H·Dh, E] = [${H}·${Dh}, ${E}]` },
        { name: 'k_proj_weight', shape: [G * Dh, spec.kdim], dims: `[G·Dh, kdim] = [${G}·${Dh}, ${spec.kdim}]` },
        { name: 'v_proj_weight', shape: [G * Dh, spec.vdim], dims: `[G·Dh, vdim] = [${G}·${Dh}, ${spec.vdim}]` },
      ]
    : [{ name: 'in_proj_weight', shape: [N, E], dims: `[(H + 2·G)·Dh, E] = [(${H} + 2·${G})·${Dh}, ${E}]` }];
  entries.push({ name: 'out_proj.weight', shape: [E, H * Dh], dims: `[E, H·Dh] = [${E}, ${H}·${Dh}]` });
  if (spec.bias) entries.push({ name: 'in_proj_bias', shape: [N], dims: n }, { name: 'out_proj.bias', shape: [E], dims: `[E] = [${E}]` });
  if (spec.outputGate) {
    entries.push({ name: 'gate_proj_weight', shape: [H * Dh, E], dims: `[H·Dh, E] = [${H}·${Dh}, ${E}]` });
    if (spec.bias) entries.push({ name: 'gate_proj_bias', shape: [H * Dh], dims: `[H·Dh] = [${H}·${Dh}]` });
  }
  return entries;
}

export function resolveWeights(spec: LayerSpec, stateDict: unknown): LayerWeights {
  const where = 'createMultiHeadAttention';
  const given = requireObject(where, 'stateDict', stateDict, 'Pass an object mapping PyTorch state_dict names to Float32Array.');
  const sd = spec.kEqV ? kEqVStateDict(where, spec, given) : given;
  const sameDims = spec.kdim === spec.embedDim && spec.vdim === spec.embedDim;
  // PyTorch keeps one packed in_proj_weight when kdim = vdim = E, and q/k/v_proj_weight otherwise;
  // both forms are accepted when they can describe the layer.
  const separate = !sameDims || (sd.in_proj_weight === undefined && sd.q_proj_weight !== undefined);
  const expected = expectedWeights(spec, separate);
  const names = expected.map((e) => e.name);
  // What the caller passes: a K = V layer's v weights are made here from its k weights (kEqVStateDict).
  const takes = spec.kEqV ? names.filter((n) => n !== 'v_proj_weight') : names;
  for (const key of Object.keys(sd)) {
    if (!names.includes(key)) {
      const hint =
        !spec.bias && key.endsWith('bias')
          ? 'The layer was created with bias: false; pass bias: true to use biases.'
          : key === 'in_proj_weight' && !sameDims
            ? `With kdim (${spec.kdim}) or vdim (${spec.vdim}) ≠ embedDim (${spec.embedDim}) the projections are separate: pass q_proj_weight, k_proj_weight, v_proj_weight.`
            : key.startsWith('gate_proj') && !spec.outputGate
              ? 'Gate weights belong to a layer with an output gate: pass config.outputGate: true (Qwen3-Next, Qwen3.5).'
              : ['q_proj_weight', 'k_proj_weight', 'v_proj_weight'].includes(key) && !separate
                ? 'Pass either in_proj_weight or q_proj_weight, k_proj_weight and v_proj_weight, not both.'
                : `This layer takes ${takes.join(', ')}.`;
      throw new InvalidArgumentError({ where, argument: `stateDict["${key}"]`, expected: 'a known state_dict name', given: 'an unexpected entry', fix: hint });
    }
  }
  const tensors: Record<string, WeightTensor> = {};
  for (const { name, shape, dims } of expected) {
    const length = shape.reduce((a, b) => a * b, 1);
    const shapeText = `[${shape.join(', ')}] = ${length} (${dims})`;
    if (sd[name] === undefined) {
      // A layer with q/k/v biases and none on the output (Qwen2): the output bias is zero.
      if (name === 'out_proj.bias' && sd.in_proj_bias !== undefined) {
        tensors[name] = new Float32Array(length);
        continue;
      }
      throw new MissingWeightError({
        where,
        argument: `stateDict["${name}"]`,
        expected: `a Float32Array ${shapeText}`,
        given: 'nothing',
        fix: `PyTorch's nn.MultiheadAttention.state_dict() has it; pass all of: ${takes.join(', ')}.`,
      });
    }
    if (name === 'gate_proj_weight' && isQuantizedValue(sd[name])) {
      throw new UnsupportedError({
        where,
        argument: `stateDict["${name}"]`,
        expected: `a Float32Array ${shapeText}: the output gate's weight is float32 on every backend`,
        given: 'a quantized tensor',
        fix: 'Pass dequantize(weight) (exact, as ggml computes it) for gate_proj_weight; the other projections may stay quantized.',
      });
    }
    tensors[name] =
      shape.length === 2 && isQuantizedValue(sd[name]) && !name.startsWith('gate_proj')
        ? checkQuantized(where, `stateDict["${name}"]`, sd[name], shape as [number, number], dims)
        : requireFloat32Array(where, `stateDict["${name}"]`, sd[name], length, shapeText);
  }
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = spec;
  let inProjWeight: WeightTensor | null = tensors.in_proj_weight ?? null;
  // Separate float q/k/v weights of a self-attention layer are packed into one in_proj_weight; quantized
  // ones (each of its own type, as GGUF files mix them) stay separate.
  const separateFloat = [tensors.q_proj_weight, tensors.k_proj_weight, tensors.v_proj_weight].every((w) => w instanceof Float32Array);
  if (!inProjWeight && sameDims && separateFloat) {
    const packed = new Float32Array((H + 2 * G) * Dh * E);
    packed.set(tensors.q_proj_weight as Float32Array, 0);
    packed.set(tensors.k_proj_weight as Float32Array, H * Dh * E);
    packed.set(tensors.v_proj_weight as Float32Array, (H + G) * Dh * E);
    inProjWeight = packed;
  }
  if (spec.activations === 'q8' && Object.values(tensors).every((t) => t instanceof Float32Array)) {
    throw new InvalidArgumentError({
      where,
      argument: 'config.activations',
      expected: "'f32' on a layer whose weights are all float32: 'q8' quantizes the inputs of projections with quantized weights",
      given: "'q8'",
      fix: "Leave config.activations out, or pass quantized projection weights (quantizeWeights, a GGUF's q4_0 / q8_0 / q4_k / q6_k, MatMulNBits).",
    });
  }
  return {
    inProjWeight,
    qProjWeight: inProjWeight ? rows(inProjWeight, 0, H * Dh, E) : tensors.q_proj_weight,
    kProjWeight: inProjWeight ? rows(inProjWeight, H * Dh, (H + G) * Dh, E) : tensors.k_proj_weight,
    vProjWeight: inProjWeight ? rows(inProjWeight, (H + G) * Dh, (H + 2 * G) * Dh, E) : tensors.v_proj_weight,
    inProjBias: spec.bias ? (tensors.in_proj_bias as Float32Array) : null,
    outProjWeight: tensors['out_proj.weight'],
    outProjBias: spec.bias ? (tensors['out_proj.bias'] as Float32Array) : null,
    ...(spec.outputGate ? { gateProjWeight: tensors.gate_proj_weight as Float32Array, gateProjBias: spec.bias ? (tensors.gate_proj_bias as Float32Array) : null } : {}),
  };
}

/** Rows r0 … r1 − 1 of a [·, K] weight: a view. */
function rows(w: WeightTensor, r0: number, r1: number, K: number): WeightTensor {
  return w instanceof Float32Array ? w.subarray(r0 * K, r1 * K) : sliceRows(w, r0, r1);
}

/** Whether a state_dict value is meant as a quantized tensor (an object with a dtype, not an array). */
function isQuantizedValue(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !ArrayBuffer.isView(value) && 'dtype' in value;
}

/** A private copy of a layer's weights (in_proj_weight and its q/k/v views stay consistent). */
export function copyWeights(w: LayerWeights): LayerWeights {
  const inProj = w.inProjWeight ? copyWeight(w.inProjWeight) : null;
  const [q, k, v] = inProj ? thirds(inProj, w) : [copyWeight(w.qProjWeight), copyWeight(w.kProjWeight), copyWeight(w.vProjWeight)];
  return {
    inProjWeight: inProj,
    qProjWeight: q,
    kProjWeight: k,
    vProjWeight: v,
    inProjBias: w.inProjBias?.slice() ?? null,
    outProjWeight: copyWeight(w.outProjWeight),
    outProjBias: w.outProjBias?.slice() ?? null,
    ...(w.gateProjWeight ? { gateProjWeight: w.gateProjWeight.slice(), gateProjBias: w.gateProjBias?.slice() ?? null } : {}),
  };
}

/** All of a layer's weights as float32 (quantized ones dequantized exactly, as ggml / ONNX Runtime do). */
export function floatLayerWeights(w: LayerWeights): FloatLayerWeights {
  if (isFloat(w)) return w;
  const inProj = w.inProjWeight ? floatWeight(w.inProjWeight) : null;
  const [q, k, v] = inProj ? thirds(inProj, w) : [floatWeight(w.qProjWeight), floatWeight(w.kProjWeight), floatWeight(w.vProjWeight)];
  const packed = (t: WeightTensor) => !(t instanceof Float32Array);
  return {
    ...w,
    inProjWeight: inProj,
    qProjWeight: q as Float32Array,
    kProjWeight: k as Float32Array,
    vProjWeight: v as Float32Array,
    outProjWeight: floatWeight(w.outProjWeight),
    quantized: { q: packed(w.qProjWeight), k: packed(w.kProjWeight), v: packed(w.vProjWeight), out: packed(w.outProjWeight) },
  };
}

/** Whether every weight of a layer is float32. */
export function isFloat(w: LayerWeights): w is FloatLayerWeights {
  return [w.inProjWeight, w.qProjWeight, w.kProjWeight, w.vProjWeight, w.outProjWeight].every((t) => t === null || t instanceof Float32Array);
}

function copyWeight(w: WeightTensor): WeightTensor {
  return w instanceof Float32Array ? w.slice() : copyQuantized(w);
}

/** The q, k and v rows of `inProj` (a copy of w.inProjWeight, or its float32 values), in the proportions of w's views. */
function thirds(inProj: WeightTensor, w: LayerWeights): [WeightTensor, WeightTensor, WeightTensor] {
  // A float weight is measured in elements, a quantized one in rows: only the proportions carry over.
  const measure = (t: WeightTensor) => (t instanceof Float32Array ? t.length : t.shape[0]);
  const total = measure(w.inProjWeight as WeightTensor);
  const size = measure(inProj);
  const a = (size * measure(w.qProjWeight)) / total;
  const b = (size * measure(w.kProjWeight)) / total;
  if (inProj instanceof Float32Array) return [inProj.subarray(0, a), inProj.subarray(a, a + b), inProj.subarray(a + b)];
  return [sliceRows(inProj, 0, a), sliceRows(inProj, a, a + b), sliceRows(inProj, a + b, size)];
}
