// Rotary position embeddings and QK-norm: what a layer does to every query and key head after the
// projection (and bias), before attention and before K enters a KV cache. Resolved from the layer
// config (createMultiHeadAttention's `rotary`, `qkNorm`) and, per call, the positions of its tokens.
// The kernel is shaders/head_transform.wgsl; the reference cpu/head-transform.ts.

import { InvalidArgumentError, ShapeMismatchError } from '../errors.ts';
import { QK_NORM_KEYS, ROTARY_KEYS, V_NORM_KEYS } from '../option-keys.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireFloat32Array, requireObject, requirePositiveInteger } from '../validate.ts';
import { requireBothOrNeither } from './checks.ts';
import type { QkNormPlan, RotaryPlan, VNormPlan } from './types.ts';

/** The layer config's `rotary` (or scaledDotProductAttention's, `name` = 'options.rotary'), checked for head size Dh. */
export function resolveRotary(where: string, value: unknown, Dh: number, name = 'config.rotary'): RotaryPlan | null {
  if (value === undefined) return null;
  const r = requireObject(where, name, value, 'Pass { dim?, base?, interleaved?, invFreq?, attentionFactor?, cos?, sin? }.');
  rejectUnknownKeys(where, name, r, ROTARY_KEYS);
  const dim = r.dim === undefined ? Dh : requirePositiveInteger(where, `${name}.dim`, r.dim);
  if (dim % 2 !== 0 || dim > Dh) {
    throw new InvalidArgumentError({
      where,
      argument: `${name}.dim`,
      expected: `an even number ≤ the head size (${Dh})`,
      given: String(dim),
      fix: 'Rotary rotates pairs of features of each head.',
    });
  }
  let base = 10000;
  if (r.base !== undefined) {
    if (typeof r.base !== 'number' || !Number.isFinite(r.base) || r.base <= 1) {
      throw new InvalidArgumentError({ where, argument: `${name}.base`, expected: 'a finite number > 1 (default 10000)', given: describe(r.base) });
    }
    base = r.base;
  }
  const interleaved = r.interleaved === undefined ? false : requireBoolean(where, `${name}.interleaved`, r.interleaved);
  requireBothOrNeither(where, name, r, 'cos', 'sin');
  let cos: Float32Array | null = null;
  let sin: Float32Array | null = null;
  if (r.cos !== undefined) {
    const half = dim / 2;
    const shape = `[maxPositions, dim / 2] (dim / 2 = ${half})`;
    if (!(r.cos instanceof Float32Array)) throw new InvalidArgumentError({ where, argument: `${name}.cos`, expected: `a Float32Array ${shape}`, given: describe(r.cos) });
    if (r.cos.length === 0 || r.cos.length % half !== 0) {
      throw new ShapeMismatchError({
        where,
        argument: `${name}.cos`,
        expected: `a positive multiple of dim / 2 = ${half} elements ${shape}`,
        given: `length ${r.cos.length}`,
        fix: "Hugging Face's cos/sin are [S, dim] with the halves duplicated: pass their first dim / 2 columns.",
      });
    }
    cos = r.cos.slice();
    sin = requireFloat32Array(where, `${name}.sin`, r.sin, cos.length, `${shape}, the length of cos (${cos.length})`).slice();
  }
  let invFreq: Float64Array | null = null;
  if (r.invFreq !== undefined) {
    const half = dim / 2;
    for (const other of ['base', 'cos'] as const) {
      if (r[other] !== undefined) {
        throw new InvalidArgumentError({
          where,
          argument: `${name}.invFreq`,
          expected: `left out when ${name}.${other} is given`,
          given: `both invFreq and ${other}`,
          fix: other === 'base' ? 'invFreq replaces base^(−2i/dim): pass one of them.' : 'Tables replace computed angles: pass invFreq or cos/sin.',
        });
      }
    }
    if (!(r.invFreq instanceof Float32Array || r.invFreq instanceof Float64Array)) {
      throw new InvalidArgumentError({
        where,
        argument: `${name}.invFreq`,
        expected: `a Float32Array or Float64Array [dim / 2] = [${half}]`,
        given: describe(r.invFreq),
      });
    }
    if (r.invFreq.length !== half) {
      throw new ShapeMismatchError({
        where,
        argument: `${name}.invFreq`,
        expected: `dim / 2 = ${half} inverse frequencies (dim = ${dim})`,
        given: `length ${r.invFreq.length}`,
        fix: 'Give one θ_i per rotated pair; set rotary.dim to the features rotated (partial rotary).',
      });
    }
    const bad = r.invFreq.findIndex((f) => !Number.isFinite(f) || f < 0);
    if (bad >= 0) {
      throw new InvalidArgumentError({
        where,
        argument: `${name}.invFreq[${bad}]`,
        expected: 'a finite number ≥ 0 (0 leaves the pair unrotated)',
        given: String(r.invFreq[bad]),
      });
    }
    invFreq = Float64Array.from(r.invFreq);
  }
  let attentionFactor = 1;
  if (r.attentionFactor !== undefined) {
    if (typeof r.attentionFactor !== 'number' || !Number.isFinite(r.attentionFactor) || r.attentionFactor <= 0) {
      throw new InvalidArgumentError({ where, argument: `${name}.attentionFactor`, expected: 'a finite number > 0 (default 1)', given: describe(r.attentionFactor) });
    }
    if (r.cos !== undefined) {
      throw new InvalidArgumentError({
        where,
        argument: `${name}.attentionFactor`,
        expected: `left out when ${name}.cos/sin are given`,
        given: String(r.attentionFactor),
        fix: 'Tables carry their own factor: multiply it into cos and sin, or pass invFreq instead of tables.',
      });
    }
    attentionFactor = r.attentionFactor;
  }
  return { dim, base, interleaved, invFreq, attentionFactor, cos, sin };
}

/** The layer config's `qkNorm`, checked for head size Dh, H query heads and G key heads. */
export function resolveQkNorm(where: string, value: unknown, Dh: number, H: number, G: number): QkNormPlan | null {
  if (value === undefined) return null;
  const q = requireObject(
    where,
    'config.qkNorm',
    value,
    "Pass { query, key, eps?, over? }: RMS-norm weights [headDim] for query and key heads (over 'head'), or [H·headDim] and [G·headDim] (over 'all').",
  );
  rejectUnknownKeys(where, 'config.qkNorm', q, QK_NORM_KEYS);
  if (q.over !== undefined && q.over !== 'head' && q.over !== 'all') {
    throw new InvalidArgumentError({
      where,
      argument: 'config.qkNorm.over',
      expected: "'head' (default: one norm per head, weights [headDim]) or 'all' (one norm over all heads of a token, weights [H·headDim] / [G·headDim])",
      given: describe(q.over),
    });
  }
  const over: 'head' | 'all' = q.over ?? 'head';
  const [nq, nk] = over === 'all' ? [H * Dh, G * Dh] : [Dh, Dh];
  const shape = (heads: string, n: number) => (over === 'all' ? `[${heads}·headDim] = ${n} (qkNorm.over = 'all')` : `[headDim] = ${n}`);
  const query = requireFloat32Array(where, 'config.qkNorm.query', q.query, nq, shape('H', nq)).slice();
  const key = requireFloat32Array(where, 'config.qkNorm.key', q.key, nk, shape('G', nk)).slice();
  let eps = 1e-6;
  if (q.eps !== undefined) {
    if (typeof q.eps !== 'number' || !Number.isFinite(q.eps) || q.eps <= 0) {
      throw new InvalidArgumentError({ where, argument: 'config.qkNorm.eps', expected: 'a finite number > 0 (default 1e-6)', given: describe(q.eps) });
    }
    eps = q.eps;
  }
  return { query, key, eps, over, dim: Dh };
}

/** The layer config's `vNorm` (true, false, or { eps? }), for head size Dh. */
export function resolveVNorm(where: string, value: unknown, Dh: number): VNormPlan | null {
  if (value === undefined || value === false) return null;
  if (value === true) return { eps: 1e-6, dim: Dh };
  const v = requireObject(where, 'config.vNorm', value, 'Pass true, or { eps? }: a weightless RMS norm of every value head.');
  rejectUnknownKeys(where, 'config.vNorm', v, V_NORM_KEYS);
  let eps = 1e-6;
  if (v.eps !== undefined) {
    if (typeof v.eps !== 'number' || !Number.isFinite(v.eps) || v.eps <= 0) {
      throw new InvalidArgumentError({ where, argument: 'config.vNorm.eps', expected: 'a finite number > 0 (default 1e-6)', given: describe(v.eps) });
    }
    eps = v.eps;
  }
  return { eps, dim: Dh };
}

/** Positions of rotated tokens, above which given tables have no rows. */
export function maxPositions(rotary: RotaryPlan): number {
  return rotary.cos ? rotary.cos.length / (rotary.dim / 2) : Number.POSITIVE_INFINITY;
}

/**
 * The position of every query token of a call (the order of the projections' rows: batch-major),
 * from `positionIds` [B, Sq], or 0 … Sq − 1 (+ the cache's length; within each sequence for varlen).
 */
export function resolvePositions(
  where: string,
  rotary: RotaryPlan,
  shape: { batchSize: number; seqLen: number; start: number; cuSeqlens: Int32Array | null },
  positionIds: unknown,
): Int32Array {
  const { batchSize: B, seqLen: S, start, cuSeqlens } = shape;
  let positions: Int32Array;
  if (positionIds !== undefined) {
    if (!(positionIds instanceof Int32Array)) {
      throw new InvalidArgumentError({ where, argument: 'options.positionIds', expected: `an Int32Array [B, Sq] = [${B}, ${S}]`, given: describe(positionIds) });
    }
    if (positionIds.length !== B * S)
      throw new ShapeMismatchError({ where, argument: 'options.positionIds', expected: `of length B·Sq = ${B * S}`, given: `length ${positionIds.length}` });
    const bad = positionIds.findIndex((p) => p < 0);
    if (bad >= 0) throw new InvalidArgumentError({ where, argument: `options.positionIds[${bad}]`, expected: 'a position ≥ 0', given: String(positionIds[bad]) });
    positions = positionIds.slice();
  } else if (cuSeqlens) {
    positions = new Int32Array(S);
    for (let b = 0; b + 1 < cuSeqlens.length; b++) for (let t = cuSeqlens[b]; t < cuSeqlens[b + 1]; t++) positions[t] = t - cuSeqlens[b];
  } else {
    positions = Int32Array.from({ length: B * S }, (_, m) => start + (m % S));
  }
  const limit = maxPositions(rotary);
  let last = 0;
  for (const p of positions) last = Math.max(last, p);
  if (last >= limit) {
    throw new InvalidArgumentError({
      where,
      argument: positionIds !== undefined ? 'options.positionIds' : 'the positions of this call',
      expected: `positions below the rotary tables' ${limit} rows (config.rotary.cos / sin [maxPositions, dim / 2])`,
      given: `position ${last}`,
      fix: 'Give longer cos/sin tables, or leave them out to compute angles from rotary.base.',
    });
  }
  return positions;
}

/**
 * cos and sin of position·θ_i for pair i of `rotary`, in float64: from its tables, else θ_i from
 * invFreq or base^(−2i/dim), both times the attention factor.
 */
export function rotaryAngle(rotary: RotaryPlan, position: number, i: number): [number, number] {
  if (rotary.cos && rotary.sin) {
    const at = position * (rotary.dim / 2) + i;
    return [rotary.cos[at], rotary.sin[at]];
  }
  const angle = position * (rotary.invFreq ? rotary.invFreq[i] : rotary.base ** ((-2 * i) / rotary.dim));
  const f = rotary.attentionFactor;
  return [f * Math.cos(angle), f * Math.sin(angle)];
}

/** θ_i of a rotary without tables, [dim/2]: invFreq, or base^(−2i/dim) computed once per plan. */
const thetas = new WeakMap<RotaryPlan, Float64Array>();

/**
 * rotaryAngle for every pair i < dim/2 at `position`, the same numbers: cos in out[2i], sin in
 * out[2i + 1]. For the heads of one token, which share them (the CPU paths turn each head with them).
 */
export function rotaryAngles(rotary: RotaryPlan, position: number, out: Float64Array = new Float64Array(rotary.dim)): Float64Array {
  const half = rotary.dim / 2;
  if (rotary.cos && rotary.sin) {
    for (let i = 0; i < half; i++) {
      out[2 * i] = rotary.cos[position * half + i];
      out[2 * i + 1] = rotary.sin[position * half + i];
    }
    return out;
  }
  let theta = thetas.get(rotary);
  if (!theta) {
    theta = rotary.invFreq ?? Float64Array.from({ length: half }, (_, i) => rotary.base ** ((-2 * i) / rotary.dim));
    thetas.set(rotary, theta);
  }
  const f = rotary.attentionFactor;
  for (let i = 0; i < half; i++) {
    const angle = position * theta[i];
    out[2 * i] = f * Math.cos(angle);
    out[2 * i + 1] = f * Math.sin(angle);
  }
  return out;
}
