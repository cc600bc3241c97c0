// Everything about a layer and a call, checked and resolved once, before any backend runs.
// Order of checks: the layer's own sizes, then its weights, then the call's inputs.
// Nothing below this module checks arguments again.

import { InvalidArgumentError, MissingWeightError, ShapeMismatchError, UnsupportedError } from './errors.ts';
import type { ForwardOptions, MultiHeadAttentionConfig, StateDict } from './types.ts';
import {
  describe,
  rejectUnknownKeys,
  requireBoolean,
  requireFloat32Array,
  requireObject,
  requirePositiveInteger,
} from './validate.ts';

/** The sizes of one multi-head attention layer. */
export interface LayerSpec {
  embedDim: number;   // E
  numHeads: number;   // H
  numKvHeads: number; // G, divides H
  headDim: number;    // Dh = E / H
  bias: boolean;
}

/** A layer's weights, in PyTorch's layout. */
export interface LayerWeights {
  inProjWeight: Float32Array;         // [(H + 2·G)·Dh, E]
  inProjBias: Float32Array | null;    // [(H + 2·G)·Dh]
  outProjWeight: Float32Array;        // [E, E]
  outProjBias: Float32Array | null;   // [E]
}

/** One forward call, resolved. */
export interface ForwardPlan {
  layer: LayerSpec;
  batchSize: number; // B
  seqLen: number;    // Sq
  kvSeqLen: number;  // Skv (= Sq for self-attention)
  isCausal: boolean;
  /** Return the probabilities [B, H, Sq, Skv] too. */
  needWeights: boolean;
}

const CONFIG_KEYS = ['embedDim', 'numHeads', 'numKvHeads', 'bias', 'dropout'] as const;
const FORWARD_KEYS = ['batchSize', 'seqLen', 'isCausal', 'needWeights', 'dropout'] as const;

function refuseDropout(where: string, argument: string, value: unknown): void {
  if (value === undefined || value === 0) return;
  throw new UnsupportedError({
    where,
    argument,
    expected: '0 or left out',
    given: describe(value),
    fix: 'This engine runs inference only and has no dropout (PyTorch applies none in eval() mode either).',
  });
}

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
  const bias = c.bias === undefined ? true : requireBoolean(where, 'config.bias', c.bias);
  refuseDropout(where, 'config.dropout', c.dropout);
  return { embedDim, numHeads, numKvHeads, headDim: embedDim / numHeads, bias };
}

/** The state_dict entries a layer needs, with their shapes. */
export function expectedWeights(spec: LayerSpec): { name: string; shape: number[] }[] {
  const E = spec.embedDim;
  const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
  const entries = [
    { name: 'in_proj_weight', shape: [N, E] },
    { name: 'out_proj.weight', shape: [E, E] },
  ];
  if (spec.bias) entries.push({ name: 'in_proj_bias', shape: [N] }, { name: 'out_proj.bias', shape: [E] });
  return entries;
}

export function resolveWeights(spec: LayerSpec, stateDict: unknown): LayerWeights {
  const where = 'createMultiHeadAttention';
  const sd = requireObject(where, 'stateDict', stateDict, 'Pass an object mapping PyTorch state_dict names to Float32Array.');
  const expected = expectedWeights(spec);
  const names = expected.map((e) => e.name);
  for (const key of Object.keys(sd)) {
    if (!names.includes(key)) {
      const hint = !spec.bias && key.endsWith('bias')
        ? 'The layer was created with bias: false; pass bias: true to use biases.'
        : `A layer with ${JSON.stringify({ embedDim: spec.embedDim, numHeads: spec.numHeads, bias: spec.bias })} takes ${names.join(', ')}.`;
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
  return {
    inProjWeight: tensors['in_proj_weight'],
    inProjBias: spec.bias ? tensors['in_proj_bias'] : null,
    outProjWeight: tensors['out_proj.weight'],
    outProjBias: spec.bias ? tensors['out_proj.bias'] : null,
  };
}

export function resolveForwardPlan(spec: LayerSpec, query: unknown, options: unknown): ForwardPlan {
  const where = 'MultiHeadAttention.forward';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, seqLen }.') as Partial<ForwardOptions>;
  rejectUnknownKeys(where, 'options', o as Record<string, unknown>, FORWARD_KEYS);
  const batchSize = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const seqLen = requirePositiveInteger(where, 'options.seqLen', o.seqLen);
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  const needWeights = o.needWeights === undefined ? false : requireBoolean(where, 'options.needWeights', o.needWeights);
  refuseDropout(where, 'options.dropout', o.dropout);
  const E = spec.embedDim;
  const length = batchSize * seqLen * E;
  const shape = `[batchSize, seqLen, embedDim] = [${batchSize}, ${seqLen}, ${E}] = ${length}`;
  if (query instanceof Float32Array && query.length !== length) {
    throw new ShapeMismatchError({
      where,
      argument: 'query.length',
      expected: `batchSize·seqLen·embedDim = ${batchSize}·${seqLen}·${E} = ${length}`,
      given: String(query.length),
      fix: 'Pass a Float32Array laid out [batchSize, seqLen, embedDim] (batch first), or fix batchSize/seqLen.',
    });
  }
  requireFloat32Array(where, 'query', query, length, shape);
  return { layer: spec, batchSize, seqLen, kvSeqLen: seqLen, isCausal, needWeights };
}
