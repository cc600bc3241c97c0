// Everything about a layer and a call, checked and resolved once, before any backend runs.
// Order of checks: the layer's own sizes, then its weights, then the call's inputs.
// Nothing below this module checks arguments again.

import { InvalidArgumentError, MissingWeightError, ShapeMismatchError, UnsupportedError } from './errors.ts';
import { KvCache } from './kv-cache.ts';
import type { ForwardOptions, ScaledDotProductAttentionOptions } from './types.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireFloat32Array, requireObject, requirePositiveInteger } from './validate.ts';

/** The sizes of one multi-head attention layer. */
export interface LayerSpec {
  embedDim: number; // E
  numHeads: number; // H
  numKvHeads: number; // G, divides H
  headDim: number; // Dh = E / H
  kdim: number; // channels of `key` (E unless given)
  vdim: number; // channels of `value` (E unless given)
  bias: boolean;
}

/** A layer's weights, in PyTorch's layout. */
export interface LayerWeights {
  /** [(H + 2·G)·Dh, E] when kdim = vdim = E (given so, or packed from q/k/v_proj_weight); else null. */
  inProjWeight: Float32Array | null;
  qProjWeight: Float32Array; // [H·Dh, E]     (a view into inProjWeight when packed)
  kProjWeight: Float32Array; // [G·Dh, kdim]
  vProjWeight: Float32Array; // [G·Dh, vdim]
  inProjBias: Float32Array | null; // [(H + 2·G)·Dh]
  outProjWeight: Float32Array; // [E, E]
  outProjBias: Float32Array | null; // [E]
}

/** What masks a score, resolved. Additive masks hold −Infinity where a bool mask said "not allowed". */
export interface MaskPlan {
  /** Added to QKᵀ/√Dh: [Sq, Skv] (shared) or [B·H, Sq, Skv]; −Infinity = masked. */
  attnMask: Float32Array | null;
  attnMaskPerHead: boolean;
  /** [B, Skv], 1 = ignore this key. */
  keyPaddingMask: Uint8Array | null;
  /** Keys i' − w < j ≤ i' only (i' = i + Skv − Sq); 0 = no window. */
  window: number;
  /** Multiplies each head's probabilities: [B·H]. */
  headMask: Float32Array | null;
}

/** One forward call, resolved. */
export interface ForwardPlan {
  layer: LayerSpec;
  /** 'self': key = value = query. 'cross': key and value given. 'packed': cuSeqlens, sequences back to back. */
  mode: 'self' | 'cross' | 'packed';
  batchSize: number; // B (packed: the number of sequences)
  seqLen: number; // Sq (packed: T, all tokens)
  kvSeqLen: number; // Skv (= Sq unless cross)
  isCausal: boolean;
  /** Return the probabilities [B, H, Sq, Skv] too. */
  needWeights: boolean;
  masks: MaskPlan;
  /** packed: [n + 1] offsets, 0 … T; else null. */
  cuSeqlens: Int32Array | null;
  /** packed: the longest sequence; else Sq. */
  maxSeqLen: number;
  query: Float32Array; // [B, Sq, E] (packed: [T, E])
  key: Float32Array; // [B, Skv, kdim] (= query unless cross)
  value: Float32Array; // [B, Skv, vdim] (= query unless cross)
  /**
   * With a KV cache: the new tokens' K and V are appended at rows `start` … start + Sq − 1 of the
   * cache, and the queries attend over rows 0 … Skv − 1 (Skv = start + Sq).
   */
  cache: { cache: KvCache; start: number } | null;
  /**
   * GPU-resident inputs: where a GPUBuffer was passed, it is here and the array above is empty.
   * The caller keeps owning these buffers.
   */
  gpu: { query: GPUBuffer | null; key: GPUBuffer | null; value: GPUBuffer | null } | null;
  /** Leave the output (and weights) in new GPU buffers the caller owns, without a readback. */
  returnBuffer: boolean;
}

/** A private copy of a layer's weights (the packed matrix and its q/k/v views stay consistent). */
export function copyWeights(w: LayerWeights): LayerWeights {
  const packed = w.inProjWeight?.slice() ?? null;
  const q = w.qProjWeight.length;
  const k = w.kProjWeight.length;
  return {
    inProjWeight: packed,
    qProjWeight: packed ? packed.subarray(0, q) : w.qProjWeight.slice(),
    kProjWeight: packed ? packed.subarray(q, q + k) : w.kProjWeight.slice(),
    vProjWeight: packed ? packed.subarray(q + k) : w.vProjWeight.slice(),
    inProjBias: w.inProjBias?.slice() ?? null,
    outProjWeight: w.outProjWeight.slice(),
    outProjBias: w.outProjBias?.slice() ?? null,
  };
}

/** Tensor layouts of a plan ([batches, heads, rows, Dh]): packed sequences are one batch of T tokens. */
export function headLayout(plan: ForwardPlan): { batches: number; qRows: number; kvRows: number } {
  return plan.mode === 'packed' ? { batches: 1, qRows: plan.seqLen, kvRows: plan.seqLen } : { batches: plan.batchSize, qRows: plan.seqLen, kvRows: plan.kvSeqLen };
}

const CONFIG_KEYS = ['embedDim', 'numHeads', 'numKvHeads', 'kdim', 'vdim', 'bias', 'dropout'] as const;
const FORWARD_KEYS = [
  'batchSize',
  'seqLen',
  'isCausal',
  'needWeights',
  'key',
  'value',
  'kvSeqLen',
  'keyPaddingMask',
  'attnMask',
  'window',
  'headMask',
  'cuSeqlens',
  'kvCache',
  'returnBuffer',
  'dropout',
] as const;

const STORAGE_USAGE = 0x80; // GPUBufferUsage.STORAGE
const NO_DATA = new Float32Array(0);

function isGpuBuffer(value: unknown): value is GPUBuffer {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as GPUBuffer).mapAsync === 'function' &&
    typeof (value as GPUBuffer).size === 'number' &&
    typeof (value as GPUBuffer).usage === 'number'
  );
}

/** A tensor argument: a Float32Array of `length`, or a GPUBuffer holding at least that many f32 with STORAGE usage. */
function tensorInput(where: string, argument: string, value: unknown, length: number, shape: string): { host: Float32Array; gpu: GPUBuffer | null } {
  if (!isGpuBuffer(value)) return { host: requireFloat32Array(where, argument, value, length, shape), gpu: null };
  if (!(value.usage & STORAGE_USAGE)) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: 'a GPUBuffer with GPUBufferUsage.STORAGE',
      given: `a buffer of usage 0x${value.usage.toString(16)}`,
      fix: 'Create it with usage STORAGE (| COPY_DST to fill it).',
    });
  }
  // Its size is checked by the WebGPU backend, which knows the element size (f32, or f16).
  return { host: NO_DATA, gpu: value };
}

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
  const kdim = c.kdim === undefined ? embedDim : requirePositiveInteger(where, 'config.kdim', c.kdim);
  const vdim = c.vdim === undefined ? embedDim : requirePositiveInteger(where, 'config.vdim', c.vdim);
  const bias = c.bias === undefined ? true : requireBoolean(where, 'config.bias', c.bias);
  refuseDropout(where, 'config.dropout', c.dropout);
  return { embedDim, numHeads, numKvHeads, headDim: embedDim / numHeads, kdim, vdim, bias };
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

function requireUint8Array(where: string, argument: string, value: unknown, length: number, shape: string): Uint8Array {
  if (!(value instanceof Uint8Array)) {
    throw new InvalidArgumentError({ where, argument, expected: `a Uint8Array ${shape} (1 = masked out)`, given: describe(value) });
  }
  if (value.length !== length) throw new ShapeMismatchError({ where, argument, expected: `of length ${shape}`, given: `length ${value.length}` });
  return value;
}

/** attnMask: Float32Array (added) or Uint8Array (1 = not allowed), [Sq, Skv] or [B·H, Sq, Skv]. */
function resolveAttnMask(where: string, value: unknown, B: number, H: number, Sq: number, Skv: number): { mask: Float32Array; perHead: boolean } {
  const shared = Sq * Skv;
  const perHead = B * H * Sq * Skv;
  const shapes = `[Sq, Skv] = [${Sq}, ${Skv}] = ${shared} or [B·H, Sq, Skv] = [${B * H}, ${Sq}, ${Skv}] = ${perHead}`;
  if (!(value instanceof Float32Array) && !(value instanceof Uint8Array)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.attnMask',
      expected: `a Float32Array (added to the scores) or a Uint8Array (1 = not allowed), ${shapes}`,
      given: describe(value),
    });
  }
  if (value.length !== shared && value.length !== perHead) {
    throw new ShapeMismatchError({ where, argument: 'options.attnMask', expected: `of length ${shapes}`, given: `length ${value.length}` });
  }
  const mask = value instanceof Float32Array ? value : Float32Array.from(value, (v) => (v ? -Infinity : 0));
  return { mask, perHead: value.length === perHead && perHead !== shared };
}

function resolveHeadMask(where: string, value: unknown, B: number, H: number): Float32Array {
  const shapes = `[H] = ${H} or [B, H] = [${B}, ${H}] = ${B * H}`;
  if (!(value instanceof Float32Array)) {
    throw new InvalidArgumentError({ where, argument: 'options.headMask', expected: `a Float32Array ${shapes}`, given: describe(value) });
  }
  if (value.length !== H && value.length !== B * H) {
    throw new ShapeMismatchError({ where, argument: 'options.headMask', expected: `of length ${shapes}`, given: `length ${value.length}` });
  }
  if (value.length === B * H) return value;
  const expanded = new Float32Array(B * H);
  for (let b = 0; b < B; b++) expanded.set(value, b * H);
  return expanded;
}

function resolveCuSeqlens(where: string, value: unknown, queryLength: unknown, E: number): { cu: Int32Array; maxLen: number } {
  if (!(value instanceof Int32Array)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.cuSeqlens',
      expected: 'an Int32Array [n + 1] of cumulative sequence lengths, 0 … T',
      given: describe(value),
    });
  }
  if (value.length < 2) {
    throw new ShapeMismatchError({ where, argument: 'options.cuSeqlens', expected: 'of length n + 1 ≥ 2 (at least one sequence)', given: `length ${value.length}` });
  }
  if (value[0] !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.cuSeqlens[0]',
      expected: '0',
      given: String(value[0]),
      fix: 'cuSeqlens are cumulative offsets: [0, len0, len0 + len1, …, T].',
    });
  }
  let maxLen = 0;
  for (let i = 1; i < value.length; i++) {
    const len = value[i] - value[i - 1];
    if (len < 1) {
      throw new InvalidArgumentError({
        where,
        argument: `options.cuSeqlens[${i}]`,
        expected: `greater than cuSeqlens[${i - 1}] (${value[i - 1]}): offsets strictly increase`,
        given: String(value[i]),
        fix: 'Leave empty sequences out.',
      });
    }
    maxLen = Math.max(maxLen, len);
  }
  const T = value[value.length - 1];
  const qLen = queryLength as number;
  if (typeof qLen === 'number' && qLen !== T * E) {
    throw new ShapeMismatchError({
      where,
      argument: 'options.cuSeqlens',
      expected: `to end at T = query.length / embedDim = ${qLen / E}`,
      given: `${T} (the last offset)`,
      fix: 'The last offset is the total number of tokens packed in query [T, E].',
    });
  }
  return { cu: value, maxLen };
}

export function resolveForwardPlan(spec: LayerSpec, query: unknown, options: unknown, owner: object | null = null): ForwardPlan {
  const where = 'MultiHeadAttention.forward';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, seqLen }.') as Partial<ForwardOptions> & Record<string, unknown>;
  rejectUnknownKeys(where, 'options', o, FORWARD_KEYS);
  const E = spec.embedDim;
  const H = spec.numHeads;
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  const needWeights = o.needWeights === undefined ? false : requireBoolean(where, 'options.needWeights', o.needWeights);
  refuseDropout(where, 'options.dropout', o.dropout);
  const window = resolveWindow(where, o.window);

  if (o.cuSeqlens !== undefined) {
    for (const name of ['batchSize', 'seqLen', 'key', 'value', 'kvSeqLen', 'keyPaddingMask', 'attnMask', 'needWeights', 'kvCache', 'returnBuffer'] as const) {
      if (o[name] === undefined) continue;
      throw new UnsupportedError({
        where,
        argument: `options.${name}`,
        expected: 'left out with cuSeqlens',
        given: describe(o[name]),
        fix:
          name === 'needWeights'
            ? 'Packed sequences have no [B, H, S, S] weights; run a sequence alone (batchSize 1) to get its weights.'
            : 'With cuSeqlens the sequences and their lengths come from the offsets; attention stays within each sequence (isCausal, window and headMask apply).',
      });
    }
    if (!(query instanceof Float32Array)) requireFloat32Array(where, 'query', query, 0, '[T, embedDim]');
    const { cu, maxLen } = resolveCuSeqlens(where, o.cuSeqlens, (query as Float32Array).length, E);
    const n = cu.length - 1;
    const T = cu[n];
    return {
      layer: spec,
      mode: 'packed',
      batchSize: n,
      seqLen: T,
      kvSeqLen: T,
      isCausal,
      needWeights: false,
      masks: {
        attnMask: null,
        attnMaskPerHead: false,
        keyPaddingMask: null,
        window: clampWindow(window, maxLen, maxLen),
        headMask: o.headMask === undefined ? null : resolveHeadMask(where, o.headMask, n, H),
      },
      cuSeqlens: cu,
      maxSeqLen: maxLen,
      query: query as Float32Array,
      key: query as Float32Array,
      value: query as Float32Array,
      cache: null,
      gpu: null,
      returnBuffer: false,
    };
  }

  const batchSize = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const seqLen = requirePositiveInteger(where, 'options.seqLen', o.seqLen);
  const length = batchSize * seqLen * E;
  if (query instanceof Float32Array && query.length !== length) {
    throw new ShapeMismatchError({
      where,
      argument: 'query.length',
      expected: `batchSize·seqLen·embedDim = ${batchSize}·${seqLen}·${E} = ${length}`,
      given: String(query.length),
      fix: 'Pass a Float32Array laid out [batchSize, seqLen, embedDim] (batch first), or fix batchSize/seqLen.',
    });
  }
  const q = tensorInput(where, 'query', query, length, `[batchSize, seqLen, embedDim] = [${batchSize}, ${seqLen}, ${E}] = ${length}`);
  const returnBuffer = o.returnBuffer === undefined ? false : requireBoolean(where, 'options.returnBuffer', o.returnBuffer);
  const withGpu = (plan: ForwardPlan, key: GPUBuffer | null = null, value: GPUBuffer | null = null): ForwardPlan => ({
    ...plan,
    gpu: q.gpu || key || value ? { query: q.gpu, key, value } : null,
    returnBuffer,
  });

  if (o.kvCache !== undefined) return withGpu(resolveCachedPlan(where, spec, q.host, o, batchSize, seqLen, isCausal, needWeights, window, owner));

  // Cross-attention: key and value come together; kvSeqLen defaults to seqLen.
  const cross = o.key !== undefined || o.value !== undefined;
  if ((o.key === undefined) !== (o.value === undefined)) {
    const missing = o.key === undefined ? 'key' : 'value';
    throw new InvalidArgumentError({
      where,
      argument: `options.${missing}`,
      expected: `given with options.${missing === 'key' ? 'value' : 'key'}`,
      given: 'nothing',
      fix: 'Cross-attention takes both key [B, Skv, kdim] and value [B, Skv, vdim] (pass the same array twice if they are one tensor).',
    });
  }
  if (!cross && (spec.kdim !== E || spec.vdim !== E)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.key',
      expected: `given: this layer has kdim ${spec.kdim} / vdim ${spec.vdim} ≠ embedDim ${E}`,
      given: 'nothing',
      fix: 'Pass key and value (cross-attention); self-attention needs kdim = vdim = embedDim.',
    });
  }
  const kvSeqLen = o.kvSeqLen === undefined ? seqLen : requirePositiveInteger(where, 'options.kvSeqLen', o.kvSeqLen);
  if (!cross && kvSeqLen !== seqLen) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvSeqLen',
      expected: `equal to seqLen (${seqLen}) without key and value`,
      given: String(kvSeqLen),
      fix: 'Pass key and value for cross-attention.',
    });
  }
  const key = cross
    ? tensorInput(
        where,
        'options.key',
        o.key,
        batchSize * kvSeqLen * spec.kdim,
        `[B, Skv, kdim] = [${batchSize}, ${kvSeqLen}, ${spec.kdim}] = ${batchSize * kvSeqLen * spec.kdim}`,
      )
    : q;
  const value = cross
    ? o.value === o.key
      ? key
      : tensorInput(
          where,
          'options.value',
          o.value,
          batchSize * kvSeqLen * spec.vdim,
          `[B, Skv, vdim] = [${batchSize}, ${kvSeqLen}, ${spec.vdim}] = ${batchSize * kvSeqLen * spec.vdim}`,
        )
    : q;

  return withGpu(
    {
      layer: spec,
      mode: cross ? 'cross' : 'self',
      batchSize,
      seqLen,
      kvSeqLen,
      isCausal,
      needWeights,
      masks: resolveMasks(where, o, batchSize, H, seqLen, kvSeqLen, clampWindow(window, seqLen, kvSeqLen)),
      cuSeqlens: null,
      maxSeqLen: seqLen,
      query: q.host,
      key: key.host,
      value: value.host,
      cache: null,
      gpu: null,
      returnBuffer: false,
    },
    cross ? key.gpu : null,
    cross ? value.gpu : null,
  );
}

/** forward(x, { kvCache }): the new tokens' K/V are appended, and the queries see everything cached. */
function resolveCachedPlan(
  where: string,
  spec: LayerSpec,
  query: Float32Array,
  o: Record<string, unknown>,
  batchSize: number,
  seqLen: number,
  isCausal: boolean,
  needWeights: boolean,
  window: number,
  owner: object | null,
): ForwardPlan {
  const cache = o.kvCache;
  if (!(cache instanceof KvCache)) {
    throw new InvalidArgumentError({ where, argument: 'options.kvCache', expected: "a KvCache from this layer's createKvCache()", given: describe(cache) });
  }
  if (cache.disposed)
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a live KvCache',
      given: 'a disposed one',
      fix: 'Create a new one with mha.createKvCache().',
    });
  if (owner && cache.owner !== owner) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a KvCache made by this layer',
      given: 'one made by another layer',
      fix: "Each layer keeps its own keys and values: create the cache with this layer's createKvCache().",
    });
  }
  for (const name of ['key', 'value', 'kvSeqLen'] as const) {
    if (o[name] !== undefined) {
      throw new UnsupportedError({
        where,
        argument: `options.${name}`,
        expected: 'left out with kvCache',
        given: describe(o[name]),
        fix: "A KV cache holds the layer's own keys and values (self-attention over all positions so far).",
      });
    }
  }
  if (batchSize !== cache.batchSize) {
    throw new InvalidArgumentError({ where, argument: 'options.batchSize', expected: `the cache's batchSize (${cache.batchSize})`, given: String(batchSize) });
  }
  if (cache.busy) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'not in use by another forward',
      given: 'a cache a forward is still appending to',
      fix: 'Await each forward on a cache before the next one: positions are appended in order.',
    });
  }
  const start = cache.length;
  const kvSeqLen = start + seqLen;
  if (kvSeqLen > cache.maxSeqLen) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: `room for ${seqLen} more position(s): length ${start} + seqLen ${seqLen} ≤ maxSeqLen ${cache.maxSeqLen}`,
      given: `a cache with ${cache.maxSeqLen - start} free`,
      fix: 'reset() the cache, or create one with a larger maxSeqLen.',
    });
  }
  const H = spec.numHeads;
  return {
    layer: spec,
    mode: 'self',
    batchSize,
    seqLen,
    kvSeqLen,
    isCausal,
    needWeights,
    masks: resolveMasks(where, o, batchSize, H, seqLen, kvSeqLen, clampWindow(window, seqLen, kvSeqLen)),
    cuSeqlens: null,
    maxSeqLen: seqLen,
    query,
    key: query,
    value: query,
    cache: { cache, start },
    gpu: null,
    returnBuffer: false,
  };
}

function resolveMasks(where: string, o: Record<string, unknown>, B: number, H: number, Sq: number, Skv: number, window: number): MaskPlan {
  const keyPaddingMask =
    o.keyPaddingMask === undefined ? null : requireUint8Array(where, 'options.keyPaddingMask', o.keyPaddingMask, B * Skv, `[B, Skv] = [${B}, ${Skv}] = ${B * Skv}`);
  const attn = o.attnMask === undefined ? null : resolveAttnMask(where, o.attnMask, B, H, Sq, Skv);
  const headMask = o.headMask === undefined ? null : resolveHeadMask(where, o.headMask, B, H);
  return { attnMask: attn?.mask ?? null, attnMaskPerHead: attn?.perHead ?? false, keyPaddingMask, window, headMask };
}

function resolveWindow(where: string, value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new InvalidArgumentError({ where, argument: 'options.window', expected: 'a positive integer (keys i − window < j ≤ i are seen)', given: describe(value) });
  }
  return value;
}

/** A window wider than every row's reach (Sq + Skv) sees what the causal band sees: keep it in 32-bit range. */
function clampWindow(window: number, Sq: number, Skv: number): number {
  return window === 0 ? 0 : Math.min(window, Sq + Skv);
}

const SDPA_KEYS = [
  'batchSize',
  'numHeads',
  'numKvHeads',
  'seqLen',
  'kvSeqLen',
  'headDim',
  'isCausal',
  'attnMask',
  'keyPaddingMask',
  'window',
  'headMask',
  'needWeights',
  'dropout',
] as const;

/**
 * engine.scaledDotProductAttention: the attention kernel alone on projected tensors, query
 * [B, H, Sq, Dh], key and value [B, G, Skv, Dh]. Planned as a cross-attention "layer" of width H·Dh
 * whose projections are skipped.
 */
export function resolveAttentionPlan(query: unknown, key: unknown, value: unknown, options: unknown): ForwardPlan {
  const where = 'scaledDotProductAttention';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, numHeads, seqLen, headDim }.') as Partial<ScaledDotProductAttentionOptions> &
    Record<string, unknown>;
  rejectUnknownKeys(where, 'options', o, SDPA_KEYS);
  const B = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const H = requirePositiveInteger(where, 'options.numHeads', o.numHeads);
  const G = o.numKvHeads === undefined ? H : requirePositiveInteger(where, 'options.numKvHeads', o.numKvHeads);
  if (H % G !== 0) {
    throw new InvalidArgumentError({ where, argument: 'options.numKvHeads', expected: `a divisor of numHeads (${H})`, given: String(G) });
  }
  const Sq = requirePositiveInteger(where, 'options.seqLen', o.seqLen);
  const Skv = o.kvSeqLen === undefined ? Sq : requirePositiveInteger(where, 'options.kvSeqLen', o.kvSeqLen);
  const Dh = requirePositiveInteger(where, 'options.headDim', o.headDim);
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  const needWeights = o.needWeights === undefined ? false : requireBoolean(where, 'options.needWeights', o.needWeights);
  refuseDropout(where, 'options.dropout', o.dropout);
  const q = requireFloat32Array(where, 'query', query, B * H * Sq * Dh, `[B, H, Sq, Dh] = [${B}, ${H}, ${Sq}, ${Dh}] = ${B * H * Sq * Dh}`);
  const k = requireFloat32Array(where, 'key', key, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const v = requireFloat32Array(where, 'value', value, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const E = H * Dh;
  const layer: LayerSpec = { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh, kdim: E, vdim: E, bias: false };
  return {
    layer,
    mode: 'cross',
    batchSize: B,
    seqLen: Sq,
    kvSeqLen: Skv,
    isCausal,
    needWeights,
    masks: resolveMasks(where, o, B, H, Sq, Skv, clampWindow(resolveWindow(where, o.window), Sq, Skv)),
    cuSeqlens: null,
    maxSeqLen: Sq,
    query: q,
    key: k,
    value: v,
    cache: null,
    gpu: null,
    returnBuffer: false,
  };
}
