// Hugging Face rotary embeddings as inverse frequencies and one attention factor (config.rotary.invFreq,
// attentionFactor): what transformers' ROPE_INIT_FUNCTIONS and each family's compute_default_rope_parameters
// compute (src/transformers/modeling_rope_utils.py, transformers 5.18), in float32 as torch does them, so
// that invFreq is transformers' inv_freq buffer to the last bit or so. No table of max_position_embeddings
// is ever made.
//
//   default       θ_i = 1 / base^(2i/dim)
//   linear        θ_i / factor
//   llama3        Llama 3.1's frequency bands: long wavelengths / factor, short ones kept, a smooth ramp between
//   yarn          a ramp between θ_i / factor and θ_i over the correction range; attention factor
//                 0.1·ln(factor) + 1 (or from mscale / mscale_all_dim, or given)
//   proportional  (Gemma 4) the first partial·Dh/2 pairs with exponents over the whole head size, zeros after
//   dynamic       NTK scaling past max_position_embeddings: θ_i exactly while every position is below it
//   longrope      (Phi-3) short factors while every position is below original_max_position_embeddings

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';

/** A layer's rope parameters after transformers' standardize_rope_params (rope_type, rope_theta, …). */
export type RopeParameters = Record<string, unknown>;

export interface HfRope {
  /** The rotated features, from the first (partial rotary: fewer than the head size). */
  dim: number;
  invFreq: Float32Array;
  attentionFactor: number;
}

export interface RopeContext {
  where: string;
  architecture: string;
  layer: number;
  /** The head size the rope's exponents use (the layer's head_dim). */
  headDim: number;
  /** Fraction of the head rotated (partial_rotary_factor), 1 when the family has none. */
  partial: number;
  maxPositionEmbeddings: number | undefined;
  /** options.maxPositions: needed by 'dynamic' and 'longrope', exact only below their thresholds. */
  maxPositions: number | undefined;
  /** yarn's `truncate`, read from the top-level rope_parameters as transformers does. */
  truncate: boolean;
}

const f32 = Math.fround;

function num(params: RopeParameters, key: string, ctx: RopeContext, fallback?: number): number {
  const v = params[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new InvalidArgumentError({
      where: ctx.where,
      argument: `config rope parameter "${key}" (layer ${ctx.layer})`,
      expected: `a number (rope_type ${JSON.stringify(params.rope_type)} needs it)`,
      given: 'nothing',
      fix: 'The config.json is incomplete; take it from the model repository unchanged.',
    });
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new InvalidArgumentError({
      where: ctx.where,
      argument: `config rope parameter "${key}" (layer ${ctx.layer})`,
      expected: 'a finite number',
      given: JSON.stringify(v),
    });
  }
  return v;
}

/** base^(−2i/dim) for i < n as torch computes 1.0 / (base ** (arange(0, 2n, 2).float() / dim)) in float32. */
function defaultInvFreq(base: number, n: number, dim: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = f32(1 / f32(f32(base) ** f32((2 * i) / dim)));
  return out;
}

function refuse(ctx: RopeContext, type: string, why: string, fix: string): UnsupportedError {
  return new UnsupportedError({
    where: ctx.where,
    argument: `rope_type ${JSON.stringify(type)} of layer ${ctx.layer} (${ctx.architecture})`,
    expected: 'a rope this loader can express exactly as inverse frequencies and one attention factor',
    given: why,
    fix,
  });
}

function needMaxPositions(ctx: RopeContext, type: string, limit: number, limitName: string): void {
  const P = ctx.maxPositions;
  if (P === undefined) {
    throw new InvalidArgumentError({
      where: ctx.where,
      argument: 'options.maxPositions',
      expected: `a positive integer ≤ ${limitName} = ${limit}: this model's ${JSON.stringify(type)} rope changes its frequencies with the sequence length past it`,
      given: 'nothing',
      fix: `Pass { maxPositions } (the longest sequence plus KV cache you will run), at most ${limit}.`,
    });
  }
  if (P > limit) {
    throw refuse(
      ctx,
      type,
      `options.maxPositions ${P} > ${limitName} ${limit}, where transformers recomputes the frequencies from the sequence length`,
      `Run at most ${limit} positions with this layer.`,
    );
  }
}

/**
 * The layer's rope: `params` after standardize_rope_params (rope_type, rope_theta and the type's own
 * fields). Throws UnsupportedError for a rope type it cannot express exactly.
 */
export function hfRope(params: RopeParameters, ctx: RopeContext): HfRope {
  const type = String(params.rope_type ?? params.type ?? 'default');
  const base = num(params, 'rope_theta', ctx);
  const Dh = ctx.headDim;
  if (type === 'proportional') {
    // Gemma 4: exponents over the whole head, zeros for the pairs past the rotated fraction; dim = Dh.
    const rotated = Math.floor((ctx.partial * Dh) / 2);
    const factor = num(params, 'factor', ctx, 1);
    const invFreq = new Float32Array(Dh / 2);
    invFreq.set(defaultInvFreq(base, rotated, Dh));
    for (let i = 0; i < invFreq.length; i++) invFreq[i] = f32(invFreq[i] / factor);
    return { dim: Dh, invFreq, attentionFactor: 1 };
  }
  const dim = Math.trunc(Dh * ctx.partial);
  if (dim % 2 !== 0 || dim <= 0) {
    throw refuse(ctx, type, `a rotated size head_dim × partial_rotary_factor = ${Dh} × ${ctx.partial} = ${dim}, not a positive even number`, 'Check the config.');
  }
  const n = dim / 2;
  switch (type) {
    case 'default':
      return { dim, invFreq: defaultInvFreq(base, n, dim), attentionFactor: 1 };
    case 'linear': {
      const factor = num(params, 'factor', ctx);
      const invFreq = defaultInvFreq(base, n, dim);
      for (let i = 0; i < n; i++) invFreq[i] = f32(invFreq[i] / factor);
      return { dim, invFreq, attentionFactor: 1 };
    }
    case 'llama3': {
      const factor = num(params, 'factor', ctx);
      const low = num(params, 'low_freq_factor', ctx);
      const high = num(params, 'high_freq_factor', ctx);
      const old = num(params, 'original_max_position_embeddings', ctx, ctx.maxPositionEmbeddings);
      const lowWavelen = old / low;
      const highWavelen = old / high;
      const invFreq = defaultInvFreq(base, n, dim);
      for (let i = 0; i < n; i++) {
        const inv = invFreq[i];
        const wavelen = f32((2 * Math.PI) / inv);
        let v = wavelen > lowWavelen ? f32(inv / factor) : inv;
        if (!(wavelen < highWavelen) && !(wavelen > lowWavelen)) {
          const smooth = f32((old / wavelen - low) / (high - low));
          v = f32(f32(f32(1 - smooth) * f32(v / factor)) + f32(smooth * v));
        }
        invFreq[i] = v;
      }
      return { dim, invFreq, attentionFactor: 1 };
    }
    case 'yarn': {
      const original = num(params, 'original_max_position_embeddings', ctx, ctx.maxPositionEmbeddings);
      let factor = params.factor === undefined || params.factor === null ? undefined : num(params, 'factor', ctx);
      if (factor === undefined) factor = num({ m: ctx.maxPositionEmbeddings }, 'm', ctx) / original;
      const mscale = (scale: number, m = 1) => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
      let attentionFactor = params.attention_factor === undefined || params.attention_factor === null ? undefined : num(params, 'attention_factor', ctx);
      if (attentionFactor === undefined) {
        const m = params.mscale as number | undefined;
        const mAll = params.mscale_all_dim as number | undefined;
        attentionFactor = m && mAll ? mscale(factor, m) / mscale(factor, mAll) : mscale(factor);
      }
      const betaFast = (params.beta_fast as number) || 32;
      const betaSlow = (params.beta_slow as number) || 1;
      const correction = (rot: number) => (dim * Math.log(original / (rot * 2 * Math.PI))) / (2 * Math.log(base));
      let lo = correction(betaFast);
      let hi = correction(betaSlow);
      if (ctx.truncate) {
        lo = Math.floor(lo);
        hi = Math.ceil(hi);
      }
      lo = Math.max(lo, 0);
      hi = Math.min(hi, dim - 1);
      if (lo === hi) hi += 0.001;
      const invFreq = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        const pos = f32(f32(base) ** f32((2 * i) / dim));
        const extrapolation = f32(1 / pos);
        const interpolation = f32(1 / f32(factor * pos));
        const ramp = f32(Math.min(1, Math.max(0, f32(f32(i - lo) / f32(hi - lo)))));
        const extrapolationFactor = f32(1 - ramp);
        invFreq[i] = f32(f32(interpolation * f32(1 - extrapolationFactor)) + f32(extrapolation * extrapolationFactor));
      }
      return { dim, invFreq, attentionFactor };
    }
    case 'dynamic': {
      const max = num({ m: ctx.maxPositionEmbeddings }, 'm', ctx);
      needMaxPositions(ctx, type, max, 'max_position_embeddings');
      return { dim, invFreq: defaultInvFreq(base, n, dim), attentionFactor: 1 };
    }
    case 'longrope': {
      const original = num(params, 'original_max_position_embeddings', ctx, ctx.maxPositionEmbeddings);
      const short = params.short_factor;
      if (!Array.isArray(short) || short.length !== n || !short.every((x) => typeof x === 'number' && x > 0)) {
        throw new InvalidArgumentError({
          where: ctx.where,
          argument: `config rope parameter "short_factor" (layer ${ctx.layer})`,
          expected: `${n} positive numbers (rotated size ${dim} / 2)`,
          given: Array.isArray(short) ? `${short.length} values` : JSON.stringify(short),
        });
      }
      needMaxPositions(ctx, type, original, 'original_max_position_embeddings');
      let factor = params.factor === undefined || params.factor === null ? undefined : num(params, 'factor', ctx);
      if (factor === undefined) factor = num({ m: ctx.maxPositionEmbeddings }, 'm', ctx) / original;
      let attentionFactor = params.attention_factor === undefined || params.attention_factor === null ? undefined : num(params, 'attention_factor', ctx);
      if (attentionFactor === undefined) attentionFactor = factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original));
      const invFreq = new Float32Array(n);
      for (let i = 0; i < n; i++) invFreq[i] = f32(1 / f32(f32(short[i] as number) * f32(f32(base) ** f32((2 * i) / dim))));
      return { dim, invFreq, attentionFactor };
    }
    default:
      throw refuse(
        ctx,
        type,
        'a rope type this loader does not read',
        'Types read: default, linear, llama3, yarn, proportional, dynamic and longrope (within their thresholds).',
      );
  }
}
