// createMultiHeadAttention's checks: a layer's sizes (LayerSpec) and its weights (LayerWeights).

import { InvalidArgumentError, MissingWeightError, UnsupportedError } from '../errors.ts';
import { CONFIG_KEYS } from '../option-keys.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireFloat32Array, requireObject, requirePositiveInteger } from '../validate.ts';
import { refuseDropout, resolveScoreMod } from './checks.ts';
import { resolveQkNorm, resolveRotary } from './head-transform.ts';
import type { LayerSpec, LayerWeights } from './types.ts';

export function resolveLayerSpec(config: unknown): LayerSpec {
  const where = 'createMultiHeadAttention';
  const c = requireObject(where, 'config', config, 'Pass { embedDim, numHeads }.');
  rejectUnknownKeys(where, 'config', c, CONFIG_KEYS);
  const embedDim = requirePositiveInteger(where, 'config.embedDim', c.embedDim);
  const numHeads = requirePositiveInteger(where, 'config.numHeads', c.numHeads);
  if (embedDim % numHeads !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'config.embedDim',
      expected: `divisible by numHeads (${numHeads})`,
      given: String(embedDim),
      fix: 'Each head gets embedDim / numHeads channels; choose sizes that divide.',
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
  const headDim = embedDim / numHeads;
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
    qkNorm: resolveQkNorm(where, c.qkNorm, headDim),
    scoreMod,
    attention,
  };
}

function resolveAttentionKind(where: string, value: unknown): 'softmax' | 'linear' {
  if (value === undefined) return 'softmax';
  if (value === 'softmax' || value === 'linear') return value;
  throw new InvalidArgumentError({ where, argument: 'config.attention', expected: '"softmax" (default) or "linear"', given: describe(value) });
}

/** The state_dict entries a layer takes, with their shapes; `separate` selects q/k/v_proj_weight. */
export function expectedWeights(spec: LayerSpec, separate: boolean): { name: string; shape: number[] }[] {
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = spec;
  const N = (H + 2 * G) * Dh;
  const entries = separate
    ? [
        { name: 'q_proj_weight', shape: [H * Dh, E] },
        { name: 'k_proj_weight', shape: [G * Dh, spec.kdim] },
        { name: 'v_proj_weight', shape: [G * Dh, spec.vdim] },
      ]
    : [{ name: 'in_proj_weight', shape: [N, E] }];
  entries.push({ name: 'out_proj.weight', shape: [E, E] });
  if (spec.bias) entries.push({ name: 'in_proj_bias', shape: [N] }, { name: 'out_proj.bias', shape: [E] });
  return entries;
}

export function resolveWeights(spec: LayerSpec, stateDict: unknown): LayerWeights {
  const where = 'createMultiHeadAttention';
  const sd = requireObject(where, 'stateDict', stateDict, 'Pass an object mapping PyTorch state_dict names to Float32Array.');
  const sameDims = spec.kdim === spec.embedDim && spec.vdim === spec.embedDim;
  // PyTorch keeps one packed in_proj_weight when kdim = vdim = E, and q/k/v_proj_weight otherwise;
  // both forms are accepted when they can describe the layer.
  const separate = !sameDims || (sd.in_proj_weight === undefined && sd.q_proj_weight !== undefined);
  const expected = expectedWeights(spec, separate);
  const names = expected.map((e) => e.name);
  for (const key of Object.keys(sd)) {
    if (!names.includes(key)) {
      const hint =
        !spec.bias && key.endsWith('bias')
          ? 'The layer was created with bias: false; pass bias: true to use biases.'
          : key === 'in_proj_weight' && !sameDims
            ? `With kdim (${spec.kdim}) or vdim (${spec.vdim}) ≠ embedDim (${spec.embedDim}) the projections are separate: pass q_proj_weight, k_proj_weight, v_proj_weight.`
            : ['q_proj_weight', 'k_proj_weight', 'v_proj_weight'].includes(key) && !separate
              ? 'Pass either in_proj_weight or q_proj_weight, k_proj_weight and v_proj_weight, not both.'
              : `This layer takes ${names.join(', ')}.`;
      throw new InvalidArgumentError({ where, argument: `stateDict["${key}"]`, expected: 'a known state_dict name', given: 'an unexpected entry', fix: hint });
    }
  }
  const tensors: Record<string, Float32Array> = {};
  for (const { name, shape } of expected) {
    const length = shape.reduce((a, b) => a * b, 1);
    const shapeText = `[${shape.join(', ')}] = ${length}`;
    if (sd[name] === undefined) {
      throw new MissingWeightError({
        where,
        argument: `stateDict["${name}"]`,
        expected: `a Float32Array ${shapeText}`,
        given: 'nothing',
        fix: `PyTorch's nn.MultiheadAttention.state_dict() has it; pass all of: ${names.join(', ')}.`,
      });
    }
    tensors[name] = requireFloat32Array(where, `stateDict["${name}"]`, sd[name], length, shapeText);
  }
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = spec;
  let inProjWeight: Float32Array | null = tensors.in_proj_weight ?? null;
  if (!inProjWeight && sameDims) {
    inProjWeight = new Float32Array((H + 2 * G) * Dh * E);
    inProjWeight.set(tensors.q_proj_weight, 0);
    inProjWeight.set(tensors.k_proj_weight, H * Dh * E);
    inProjWeight.set(tensors.v_proj_weight, (H + G) * Dh * E);
  }
  return {
    inProjWeight,
    qProjWeight: inProjWeight ? inProjWeight.subarray(0, H * Dh * E) : tensors.q_proj_weight,
    kProjWeight: inProjWeight ? inProjWeight.subarray(H * Dh * E, (H + G) * Dh * E) : tensors.k_proj_weight,
    vProjWeight: inProjWeight ? inProjWeight.subarray((H + G) * Dh * E) : tensors.v_proj_weight,
    inProjBias: spec.bias ? tensors.in_proj_bias : null,
    outProjWeight: tensors['out_proj.weight'],
    outProjBias: spec.bias ? tensors['out_proj.bias'] : null,
  };
}

/** A private copy of a layer's weights (in_proj_weight and its q/k/v views stay consistent). */
export function copyWeights(w: LayerWeights): LayerWeights {
  const inProj = w.inProjWeight?.slice() ?? null;
  const q = w.qProjWeight.length;
  const k = w.kProjWeight.length;
  return {
    inProjWeight: inProj,
    qProjWeight: inProj ? inProj.subarray(0, q) : w.qProjWeight.slice(),
    kProjWeight: inProj ? inProj.subarray(q, q + k) : w.kProjWeight.slice(),
    vProjWeight: inProj ? inProj.subarray(q + k) : w.vProjWeight.slice(),
    inProjBias: w.inProjBias?.slice() ?? null,
    outProjWeight: w.outProjWeight.slice(),
    outProjBias: w.outProjBias?.slice() ?? null,
  };
}
