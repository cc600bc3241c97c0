// Numbers at the edges of float32: (a) very large finite logits stay finite and correct on every
// backend (WebGPU, 'wasm', the CPU), with a tolerance derived from their size; (b) NaN and ±Infinity in the input or the
// weights propagate on the CPU backend as they do in PyTorch (fixtures from
// scripts/make_special_fixtures.py); (c) on WebGPU such values give unspecified numbers, but the
// call completes, its arrays have the right lengths, the device reports no error, and the layer
// (and the engine's pooled buffers) give correct results on the next, normal call.

import { describe, expect, test } from 'vitest';
import {
  type BatchedForwardOptions,
  type ForwardOptions,
  type ForwardResult,
  type MultiHeadAttentionConfig,
  referenceMultiHeadAttention,
  type StateDict,
} from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const EPS = 2 ** -23;

const engines = useEngines('webgpu', 'cpu', 'wasm');

/** Fails (instead of hanging the run) when `promise` takes longer than `ms`. */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: did not complete within ${ms} ms (a hang?)`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function scaled(x: Float32Array, s: number): Float32Array {
  return Float32Array.from(x, (v) => v * s);
}

function allFinite(a: ArrayLike<number>): boolean {
  for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i])) return false;
  return true;
}

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// (a) Very large finite logits.
//
// With inputs ×1e3 and weights of the usual size, Q and K entries are ~1e3 and the logits
// s = q·k/√Dh reach ~1e6 and more. How well can float32 know the result?
//
//  1. A logit is a chain of two dot products (the projection, length E, then q·k, length Dh). The
//     float32 rounding error of a dot product is bounded by γ·Σ|terms| (γ ≈ √n·ε for random-signed
//     rounding errors; we use 16·√n·ε as f32Tolerance does), so
//         |Δs_ij| ≤ δ_ij = γ · A_ij,   A_ij = Σ_d Q̃_id·K̃_jd / √Dh,
//     where Q̃ = |W_q|·|x| + |b_q| (and K̃ likewise) is the projection of absolute values: A_ij ≥ |s_ij|
//     and is of the same size, so δ scales with max|logit|·2⁻²³, as probabilityTolerance says. The
//     GPU also evaluates exp2(s − m), whose WGSL accuracy is 3 + 2·|s − m| ULP: another
//     2·|s − m|·ε ≤ 4·max|logit|·ε in the exponent.
//  2. p_j = exp(s_j − m) / Σ_k exp(s_k − m). An error δ in every logit moves the numerator and the
//     denominator each by a factor within e^{±2δ} (s_j and m both move), so the relative error of
//     each probability is at most r = e^{4δ} − 1 (≈ 4δ when small), and |Δp_j| ≤ min(1, p_j·r).
//  3. The attention output is a weighted average of V rows, o = Σ_j p_j v_j, and Σ_j Δp_j = 0 (both
//     sum to 1), so
//         |Δo| = |Σ_j Δp_j (v_j − o)| ≤ Σ_j min(1, p_j·r)·|v_j − o|  ≤ r · 2·max|V|.
//     The right-hand form is the coarse bound: |error| ∝ |V| × (relative error of the probabilities)
//     ∝ |V| · max|logit| · 2⁻²³. At logits ~1e6, r ~ 1 and that bound says nothing (the float32
//     logits cannot resolve a near tie between two keys any more); the middle form keeps the
//     spread of V under p, which is ~0 for the (typical) rows whose softmax is saturated, so we
//     check against it: it is still an honest worst case, computed per element from the float64
//     reference. On top come the rounding of V itself (γ·Ṽ) and of the P·V sum (γ·Σ p|v|).
//  4. The layer output y = W_O·o + b adds Σ_e |W_O[n, e]|·|Δo_e| and the rounding of that product,
//     γ·(Σ_e |W_O[n, e]·o_e| + |b_n|).
// ─────────────────────────────────────────────────────────────────────────────────────────────────

interface AttentionTerms {
  B: number;
  H: number;
  G: number;
  Sq: number;
  Skv: number;
  Dh: number;
  scores: Float64Array; // [B, H, Sq, Skv], −Infinity where masked
  probs: Float64Array; // [B, H, Sq, Skv] (float64 reference)
  qAbs: ArrayLike<number>; // Q̃ [B, H, Sq, Dh]
  kAbs: ArrayLike<number>; // K̃ [B, G, Skv, Dh]
  v: ArrayLike<number>; // [B, G, Skv, Dh]
  vErr: ArrayLike<number> | null; // bound on |ΔV| elementwise (null: V is given exactly)
  o: ArrayLike<number>; // [B, H, Sq, Dh] reference attention output
  gammaLogit: number; // γ for the chain that makes a logit
  gammaSum: number; // γ for the softmax sum and P·V (length Skv)
}

/** Per-element bounds on |Δo| [B, H, Sq, Dh] and on |Δp| [B, H, Sq, Skv], from steps 1–3 above. */
function attentionBounds(t: AttentionTerms): { oTol: Float64Array; pTol: Float64Array; maxR: number } {
  const { B, H, G, Sq, Skv, Dh } = t;
  const oTol = new Float64Array(B * H * Sq * Dh);
  const pTol = new Float64Array(B * H * Sq * Skv);
  let maxR = 0;
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / (H / G));
      for (let i = 0; i < Sq; i++) {
        const row = ((b * H + h) * Sq + i) * Skv;
        const qRow = ((b * H + h) * Sq + i) * Dh;
        let aMax = 0;
        let lMax = 0;
        for (let j = 0; j < Skv; j++) {
          if (!Number.isFinite(t.scores[row + j])) continue;
          const kRow = ((b * G + g) * Skv + j) * Dh;
          let a = 0;
          for (let d = 0; d < Dh; d++) a += t.qAbs[qRow + d] * t.kAbs[kRow + d];
          aMax = Math.max(aMax, a / Math.sqrt(Dh));
          lMax = Math.max(lMax, Math.abs(t.scores[row + j]));
        }
        const delta = t.gammaLogit * aMax + 4 * lMax * EPS; // step 1
        const r = Math.expm1(4 * delta); // step 2 (Infinity when δ is huge: then |Δp| ≤ 1)
        maxR = Math.max(maxR, r);
        for (let j = 0; j < Skv; j++) {
          const p = t.probs[row + j];
          if (p === 0) continue;
          const dp = Math.min(1, p * r) + t.gammaSum * p;
          pTol[row + j] = dp;
          const vRow = ((b * G + g) * Skv + j) * Dh;
          for (let d = 0; d < Dh; d++) {
            const v = t.v[vRow + d];
            oTol[qRow + d] +=
              dp * Math.abs(v - t.o[qRow + d]) + // step 3: the probabilities' error
              p * (t.vErr ? t.vErr[vRow + d] : 0) + // V's own rounding
              2 * t.gammaSum * p * Math.abs(v); // the P·V sum and Σ p ≠ 1 by rounding
          }
        }
      }
    }
  }
  return { oTol, pTol, maxR };
}

function absStateDict(sd: StateDict): StateDict {
  return Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, Float32Array.from(v, Math.abs)]));
}

function absOptions(o: ForwardOptions): ForwardOptions {
  if ('cuSeqlens' in o && o.cuSeqlens) return o;
  const b = o as Exclude<ForwardOptions, { cuSeqlens: Int32Array }>;
  return { ...b, key: b.key && Float32Array.from(b.key, Math.abs), value: b.value && Float32Array.from(b.value, Math.abs) };
}

function worstRatio(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: ArrayLike<number>): { ratio: number; maxErr: number } {
  let ratio = 0;
  let maxErr = 0;
  for (let i = 0; i < actual.length; i++) {
    const e = Math.abs(actual[i] - expected[i]);
    maxErr = Math.max(maxErr, e);
    ratio = Math.max(ratio, tol[i] > 0 ? e / tol[i] : e > 0 ? Infinity : 0);
  }
  return { ratio, maxErr };
}

function expectWithin(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: ArrayLike<number>, what: string): void {
  const bad: string[] = [];
  let count = 0;
  for (let i = 0; i < actual.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (!(err <= tol[i])) {
      count++;
      if (bad.length < 8) bad.push(`  [${i}] got ${actual[i]}, expected ${expected[i]} (|err| ${err.toExponential(2)} > ${tol[i].toExponential(2)})`);
    }
  }
  if (count) throw new Error(`${what}: ${count} of ${actual.length} elements outside the derived bound:\n${bad.join('\n')}`);
}

interface LargeCase {
  name: string;
  config: MultiHeadAttentionConfig;
  B: number;
  Sq: number;
  Skv?: number;
  options?: Partial<BatchedForwardOptions>;
  scale: number;
}

const LARGE: LargeCase[] = [
  { name: 'E=32 H=4 B=2 S=33, needWeights', config: { embedDim: 32, numHeads: 4 }, B: 2, Sq: 33, options: { needWeights: true }, scale: 1e3 },
  { name: 'E=64 H=2 B=1 S=70 causal', config: { embedDim: 64, numHeads: 2 }, B: 1, Sq: 70, options: { isCausal: true }, scale: 1e3 },
  {
    name: 'GQA E=64 H=8 G=2 B=2 S=40 window 16, needWeights',
    config: { embedDim: 64, numHeads: 8, numKvHeads: 2 },
    B: 2,
    Sq: 40,
    options: { window: 16, needWeights: true },
    scale: 1e3,
  },
  { name: 'cross-attention E=32 H=4 B=2 Sq=9 Skv=50', config: { embedDim: 32, numHeads: 4 }, B: 2, Sq: 9, Skv: 50, options: { needWeights: true }, scale: 1e3 },
  { name: 'E=16 H=1 B=1 S=20, inputs ×1e12 (logits ~1e25)', config: { embedDim: 16, numHeads: 1 }, B: 1, Sq: 20, options: { needWeights: true }, scale: 1e12 },
];

describe('(a) very large finite logits', () => {
  // The float32 backends, WebGPU and 'wasm' (whose polynomial exp errs by ~2 ULP, under WGSL's exp2 bound), against the CPU.
  test.each(LARGE.flatMap((c) => (['webgpu', 'wasm'] as const).map((backend) => [c.name, backend, c] as const)))(
    '%s: finite on %s and the CPU, equal within the logit-derived bound',
    async (_, backend, c) => {
      const E = c.config.embedDim;
      const H = c.config.numHeads;
      const G = c.config.numKvHeads ?? H;
      const Dh = E / H;
      const Skv = c.Skv ?? c.Sq;
      const sd = randomStateDict(c.config, 17 + c.Sq);
      const rng = mulberry32(5 + c.Sq * 7 + Skv);
      const x = scaled(uniform(c.B * c.Sq * E, 1, rng), c.scale);
      const options: BatchedForwardOptions = { batchSize: c.B, seqLen: c.Sq, ...c.options };
      if (c.Skv !== undefined) {
        const kv = scaled(uniform(c.B * Skv * E, 1, rng), c.scale);
        Object.assign(options, { key: kv, value: kv, kvSeqLen: Skv });
      }
      const a = engines.of(backend).createMultiHeadAttention(c.config, sd);
      const b = engines.cpu.createMultiHeadAttention(c.config, sd);
      try {
        const g = backend === 'webgpu' ? await withErrorScopes(engines.gpu.device!, () => a.forward(x, options)) : await a.forward(x, options);
        const r = await b.forward(x, options);
        expect(allFinite(g.output), `${backend} output finite`).toBe(true);
        expect(allFinite(r.output), 'CPU output finite').toBe(true);

        const ref = referenceMultiHeadAttention(c.config, sd, x, options);
        const abs = referenceMultiHeadAttention(c.config, absStateDict(sd), Float32Array.from(x, Math.abs), absOptions(options));
        const gamma = (n: number) => 16 * Math.sqrt(n) * EPS;
        const maxLogit = maxAbsFinite(ref.scores!);
        const { oTol, pTol, maxR } = attentionBounds({
          B: c.B,
          H,
          G,
          Sq: c.Sq,
          Skv,
          Dh,
          scores: ref.scores!,
          probs: ref.probs!,
          qAbs: abs.q,
          kAbs: abs.k,
          v: ref.v,
          vErr: abs.v.map((t) => gamma(E) * t),
          o: ref.attention,
          gammaLogit: gamma(E + Dh),
          gammaSum: gamma(Skv),
        });
        // Step 4: through W_O.
        const W = sd['out_proj.weight'];
        const bias = sd['out_proj.bias'];
        const yTol = new Float64Array(c.B * c.Sq * E);
        for (let bb = 0; bb < c.B; bb++) {
          for (let i = 0; i < c.Sq; i++) {
            for (let n = 0; n < E; n++) {
              let prop = 0;
              let mag = Math.abs(bias[n]);
              for (let e = 0; e < E; e++) {
                const oi = ((bb * H + Math.floor(e / Dh)) * c.Sq + i) * Dh + (e % Dh);
                prop += Math.abs(W[n * E + e]) * oTol[oi];
                mag += Math.abs(W[n * E + e] * ref.attention[oi]);
              }
              yTol[(bb * c.Sq + i) * E + n] = prop + gamma(E) * mag;
            }
          }
        }
        // The CPU backend is the float64 reference rounded once to float32.
        expectWithin(
          r.output,
          ref.output,
          Array.from(ref.output, (y) => Math.abs(y) * EPS),
          'CPU output vs the float64 reference',
        );
        const seen = worstRatio(g.output, r.output, yTol);
        const vMax = maxAbsFinite(ref.v);
        // How tight the bound is: its median and 90th percentile relative to max|y| (rows whose softmax
        // is saturated are held to rounding level, ~16·√n·ε).
        const yMax = maxAbsFinite(ref.output);
        const rel = Array.from(yTol, (t) => t / yMax).sort((u, v) => u - v);
        const q = (f: number) => rel[Math.min(rel.length - 1, Math.floor(f * rel.length))].toExponential(1);
        console.log(
          `  ${c.name} (${backend}): max|logit| ${maxLogit.toExponential(2)}, max|V| ${vMax.toExponential(2)}, max r ${maxR.toExponential(2)}; ` +
            `max|${backend} − cpu| ${seen.maxErr.toExponential(2)} = ${seen.ratio.toExponential(2)} of its bound ` +
            `(coarse bound r·2·max|V| would be ${(maxR * 2 * vMax).toExponential(2)}); bound/max|y|: median ${q(0.5)}, 90% ${q(0.9)}, max ${q(1)}`,
        );
        expectWithin(g.output, r.output, yTol, `${c.name}: ${backend} output`);
        if (options.needWeights) {
          expect(allFinite(g.attentionWeights!), `${backend} weights finite`).toBe(true);
          const base = probabilityTolerance(E, Skv, maxLogit);
          expectWithin(
            g.attentionWeights!,
            r.attentionWeights!,
            Array.from(pTol, (t, i) => t + base.atol + base.rtol * r.attentionWeights![i]),
            `${c.name}: ${backend} weights`,
          );
        }
      } finally {
        a.dispose();
        b.dispose();
      }
    },
  );

  test('scaledDotProductAttention on Q, K, V ×1e3: finite, WebGPU = CPU within the logit-derived bound', async () => {
    const B = 1,
      H = 4,
      G = 2,
      Sq = 33,
      Skv = 40,
      Dh = 32;
    const rng = mulberry32(77);
    const q = scaled(uniform(B * H * Sq * Dh, 1, rng), 1e3);
    const k = scaled(uniform(B * G * Skv * Dh, 1, rng), 1e3);
    const v = scaled(uniform(B * G * Skv * Dh, 1, rng), 1e3);
    const options = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal: true, needWeights: true };
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, options));
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, options);
    expect(allFinite(g.output) && allFinite(c.output)).toBe(true);
    // Scores from the inputs, as the CPU backend computes them (causal: j ≤ i + Skv − Sq).
    const scores = new Float64Array(B * H * Sq * Skv).fill(-Infinity);
    for (let h = 0; h < H; h++) {
      const gg = Math.floor(h / (H / G));
      for (let i = 0; i < Sq; i++) {
        for (let j = 0; j <= i + Skv - Sq; j++) {
          let s = 0;
          for (let d = 0; d < Dh; d++) s += q[(h * Sq + i) * Dh + d] * k[(gg * Skv + j) * Dh + d];
          scores[(h * Sq + i) * Skv + j] = s / Math.sqrt(Dh);
        }
      }
    }
    const { oTol, pTol } = attentionBounds({
      B,
      H,
      G,
      Sq,
      Skv,
      Dh,
      scores,
      probs: Float64Array.from(c.attentionWeights!),
      qAbs: q.map(Math.abs),
      kAbs: k.map(Math.abs),
      v,
      vErr: null,
      o: c.output,
      gammaLogit: 16 * Math.sqrt(Dh) * EPS,
      gammaSum: 16 * Math.sqrt(Skv) * EPS,
    });
    // The CPU result is itself rounded to float32 once: allow that too.
    expectWithin(
      g.output,
      c.output,
      Array.from(oTol, (t, i) => t + 2 * EPS * Math.abs(c.output[i])),
      'sdpa output',
    );
    const base = probabilityTolerance(Dh, Skv, maxAbsFinite(scores));
    expectWithin(
      g.attentionWeights!,
      c.attentionWeights!,
      Array.from(pTol, (t, i) => t + base.atol + base.rtol * c.attentionWeights![i]),
      'sdpa weights',
    );
  });
});

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// (b) NaN and ±Infinity on the CPU backend, against PyTorch 1.13 (test/fixtures/pytorch-special).
// ─────────────────────────────────────────────────────────────────────────────────────────────────

interface SpecialFixture {
  description: string;
  config: MultiHeadAttentionConfig;
  options: { batchSize: number; seqLen: number; isCausal: boolean; needWeights: boolean };
  special: { tensor: string; index: number; value: string };
  stateDict: Record<string, (number | string)[]>;
  query: (number | string)[];
  output: (number | string)[];
  attentionWeights: (number | string)[];
}

const SPECIAL_VALUES: Record<string, number> = { NaN: Number.NaN, Infinity: Infinity, '-Infinity': -Infinity };

/** JSON has no NaN or ±Infinity: the fixtures write them as strings. */
function parseNumbers(values: (number | string)[]): number[] {
  return values.map((v) => {
    if (typeof v === 'number') return v;
    if (!(v in SPECIAL_VALUES)) throw new Error(`unexpected string ${JSON.stringify(v)} in a fixture array`);
    return SPECIAL_VALUES[v];
  });
}

// A failure to read them is reported by the 'there are fixtures' test below.
const specialSet = loadJsonFixtures<SpecialFixture>(
  new URL('./fixtures/pytorch-special/', import.meta.url),
  'Regenerate them with `/usr/bin/python3 scripts/make_special_fixtures.py`.',
);
const fixtures = specialSet.fixtures;

function kind(v: number): 'NaN' | '+Inf' | '-Inf' | 'finite' {
  return Number.isNaN(v) ? 'NaN' : v === Infinity ? '+Inf' : v === -Infinity ? '-Inf' : 'finite';
}

/**
 * The NaN and ±Infinity positions must be exactly PyTorch's; finite elements within `tol`.
 * `shape` names the index in messages, e.g. [B, S, E].
 */
function expectSamePattern(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: { atol: number; rtol: number }, shape: number[], what: string): void {
  expect(actual.length, `${what}: length`).toBe(expected.length);
  const at = (i: number) => {
    const idx: number[] = [];
    for (let k = shape.length - 1; k >= 0; k--) {
      idx.unshift(i % shape[k]);
      i = Math.floor(i / shape[k]);
    }
    return `[${idx.join(', ')}]`;
  };
  const bad: string[] = [];
  let count = 0;
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i];
    const e = expected[i];
    const ok = kind(a) === kind(e) && (kind(e) !== 'finite' || Math.abs(a - e) <= tol.atol + tol.rtol * Math.abs(e));
    if (!ok) {
      count++;
      if (bad.length < 12) bad.push(`  ${at(i)} engine ${a}, PyTorch ${e}`);
    }
  }
  if (count) throw new Error(`${what}: ${count} of ${actual.length} elements differ from PyTorch (NaN/±Infinity positions must match exactly):\n${bad.join('\n')}`);
}

/** Rows (of the last axis, length n) that hold at least one NaN. */
function nanRows(a: ArrayLike<number>, n: number): number[] {
  const rows: number[] = [];
  for (let r = 0; r < a.length / n; r++) {
    for (let c = 0; c < n; c++) {
      if (Number.isNaN(a[r * n + c])) {
        rows.push(r);
        break;
      }
    }
  }
  return rows;
}

describe('(b) NaN and ±Infinity on the CPU backend propagate as in PyTorch', () => {
  test('there are fixtures', () => {
    expectFixturesPresent(specialSet);
    expect(fixtures.map((f) => f.name)).toEqual(expect.arrayContaining(['nan_query_token', 'inf_query_token', 'nan_out_proj_weight']));
  });

  function inputs(f: SpecialFixture): { stateDict: StateDict; query: Float32Array } {
    const stateDict = Object.fromEntries(Object.entries(f.stateDict).map(([k, v]) => [k, Float32Array.from(parseNumbers(v))]));
    return { stateDict, query: Float32Array.from(parseNumbers(f.query)) };
  }

  async function runFixture(f: SpecialFixture): Promise<ForwardResult> {
    const { stateDict, query } = inputs(f);
    const mha = engines.cpu.createMultiHeadAttention(f.config, stateDict);
    try {
      return await mha.forward(query, f.options);
    } finally {
      mha.dispose();
    }
  }

  for (const { name, ...f } of fixtures) {
    test(`${name}: output NaN/±Infinity positions exactly PyTorch's, finite values within tolerance`, async () => {
      const { embedDim: E, numHeads: H } = f.config;
      const { batchSize: B, seqLen: S } = f.options;
      const r = await runFixture(f);
      const expected = parseNumbers(f.output);
      expect(expected.some(Number.isNaN), 'the fixture has NaN outputs').toBe(true);
      expectSamePattern(r.output, expected, f32Tolerance([E, S, E]), [B, S, E], `${name}: output`);
      // Probabilities: the rows with a NaN are PyTorch's rows with a NaN (NaN throughout, in both), and
      // the finite rows agree.
      const w = parseNumbers(f.attentionWeights);
      expect(nanRows(r.attentionWeights!, S), `${name}: rows of attentionWeights [B·H·S] holding a NaN`).toEqual(nanRows(w, S));
      const poisoned = new Set(nanRows(w, S));
      const { stateDict, query } = inputs(f);
      const tol = probabilityTolerance(E, S, maxAbsFinite(referenceMultiHeadAttention(f.config, stateDict, query, f.options).scores!));
      for (let row = 0; row < B * H * S; row++) {
        if (poisoned.has(row)) continue;
        expectClose(r.attentionWeights!.subarray(row * S, (row + 1) * S), w.slice(row * S, (row + 1) * S), tol, `${name}: attentionWeights row ${row}`);
      }
    });
  }
});

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// (c) NaN and ±Infinity on WebGPU: unspecified numbers (WGSL lets implementations assume there are
// none), but no hang, no device error, arrays of the right length, and nothing left behind.
// ─────────────────────────────────────────────────────────────────────────────────────────────────

describe('(c) NaN and ±Infinity on WebGPU: the call completes and nothing is left broken', () => {
  const L = { embedDim: 32, numHeads: 4 };
  const sdL = randomStateDict(L, 23);
  const B = 2;
  const S = 33;
  const HANG_MS = 30_000;

  function poisoned(length: number, seed: number, value: number, where: number[]): Float32Array {
    const x = uniform(length, 1, mulberry32(seed));
    for (const i of where) x[i] = value;
    return x;
  }

  /** Runs `call` on WebGPU with a time limit inside error scopes, and checks the lengths. */
  async function survives(what: string, call: () => Promise<ForwardResult>, outputLength: number, weightsLength?: number): Promise<void> {
    const r = await within(HANG_MS, what, withErrorScopes(engines.gpu.device!, call));
    expect(r.output, `${what}: output`).toBeInstanceOf(Float32Array);
    expect(r.output.length, `${what}: output length`).toBe(outputLength);
    if (weightsLength !== undefined) expect(r.attentionWeights?.length, `${what}: attentionWeights length`).toBe(weightsLength);
  }

  /** A normal call on `layer` (WebGPU) equals the CPU backend's. */
  async function stillCorrect(what: string, run: (x: Float32Array, o: ForwardOptions) => Promise<ForwardResult>, seed: number, s = S): Promise<void> {
    const x = uniform(B * s * 32, 1, mulberry32(seed));
    const options = { batchSize: B, seqLen: s, needWeights: true, isCausal: seed % 2 === 0 };
    const g = await within(
      HANG_MS,
      `${what}: the next call`,
      withErrorScopes(engines.gpu.device!, () => run(x, options)),
    );
    const ref = engines.cpu.createMultiHeadAttention(L, sdL);
    const c = await ref.forward(x, options);
    ref.dispose();
    expectClose(g.output, c.output, f32Tolerance([32, s, 32]), `${what}: output of the next, normal call`);
    expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(32, s, 50), `${what}: weights of the next, normal call`);
  }

  const inputCases: [string, () => { query: Float32Array; options: ForwardOptions }][] = [
    ['a NaN in one query element', () => ({ query: poisoned(B * S * 32, 1, Number.NaN, [5 * 32 + 3]), options: { batchSize: B, seqLen: S, needWeights: true } })],
    [
      '+Infinity in one query element, causal',
      () => ({ query: poisoned(B * S * 32, 2, Infinity, [40 * 32 + 7]), options: { batchSize: B, seqLen: S, isCausal: true, needWeights: true } }),
    ],
    ['−Infinity in one query element', () => ({ query: poisoned(B * S * 32, 3, -Infinity, [0]), options: { batchSize: B, seqLen: S } })],
    ['every query element NaN', () => ({ query: new Float32Array(B * S * 32).fill(Number.NaN), options: { batchSize: B, seqLen: S, needWeights: true } })],
    [
      '±Infinity and NaN mixed, window',
      () => ({
        query: poisoned(B * S * 32, 4, Infinity, [1, 100, 900]).map((v, i) => (i % 97 === 0 ? -Infinity : i % 89 === 0 ? Number.NaN : v)),
        options: { batchSize: B, seqLen: S, window: 5, needWeights: true },
      }),
    ],
    [
      'NaN in the key of a cross-attention, Infinity in its value',
      () => {
        const key = poisoned(B * 50 * 32, 5, Number.NaN, [77]);
        const value = poisoned(B * 50 * 32, 6, Infinity, [1000]);
        return { query: uniform(B * S * 32, 1, mulberry32(7)), options: { batchSize: B, seqLen: S, key, value, kvSeqLen: 50, needWeights: true } };
      },
    ],
    [
      'NaN in a float attnMask, +Infinity in another entry',
      () => {
        const attnMask = uniform(S * S, 1, mulberry32(8));
        attnMask[40] = Number.NaN;
        attnMask[500] = Infinity;
        return { query: uniform(B * S * 32, 1, mulberry32(9)), options: { batchSize: B, seqLen: S, attnMask, needWeights: true } };
      },
    ],
    [
      'NaN and Infinity in headMask',
      () => ({
        query: uniform(B * S * 32, 1, mulberry32(10)),
        options: { batchSize: B, seqLen: S, headMask: Float32Array.from([1, Number.NaN, Infinity, 0]), needWeights: true },
      }),
    ],
    ['NaN in a packed batch', () => ({ query: poisoned(S * 32, 11, Number.NaN, [20 * 32]), options: { cuSeqlens: Int32Array.from([0, 10, 30, S]), isCausal: true } })],
  ];

  test.each(inputCases.map(([name, make], i) => [name, make, i] as const))(
    '%s: completes, right lengths, no device error; the same layer is then correct',
    async (name, make, i) => {
      const layer = engines.gpu.createMultiHeadAttention(L, sdL);
      try {
        const { query, options } = make();
        const Sq = 'cuSeqlens' in options && options.cuSeqlens ? query.length / 32 : S;
        const Bq = 'cuSeqlens' in options && options.cuSeqlens ? 1 : B;
        const Skv = 'kvSeqLen' in options && options.kvSeqLen ? options.kvSeqLen : Sq;
        const weights = 'needWeights' in options && options.needWeights ? Bq * 4 * Sq * Skv : undefined;
        await survives(name, () => layer.forward(query, options), query.length, weights);
        await stillCorrect(name, (x, o) => layer.forward(x, o), 100 + i);
        // Another shape, so pooled scratch buffers the poisoned call used are reused at other offsets.
        await stillCorrect(`${name} (another shape)`, (x, o) => layer.forward(x, o), 200 + i, 7);
      } finally {
        layer.dispose();
      }
    },
  );

  test.each([
    ['a NaN in in_proj_weight', 'in_proj_weight', 100, Number.NaN],
    ['+Infinity in out_proj.weight', 'out_proj.weight', 7, Infinity],
    ['−Infinity in in_proj_bias', 'in_proj_bias', 40, -Infinity],
    ['a NaN in out_proj.bias', 'out_proj.bias', 0, Number.NaN],
  ] as const)('%s: completes, right lengths, no device error; other layers on the engine stay correct', async (name, key, index, value) => {
    const sd = { ...sdL, [key]: sdL[key].slice() };
    sd[key][index] = value;
    const bad = engines.gpu.createMultiHeadAttention(L, sd);
    const good = engines.gpu.createMultiHeadAttention(L, sdL);
    try {
      const x = uniform(B * S * 32, 1, mulberry32(12));
      await survives(name, () => bad.forward(x, { batchSize: B, seqLen: S, needWeights: true }), B * S * 32, B * 4 * S * S);
      await survives(`${name}, causal`, () => bad.forward(x, { batchSize: B, seqLen: S, isCausal: true }), B * S * 32);
      await stillCorrect(name, (y, o) => good.forward(y, o), 300);
    } finally {
      bad.dispose();
      good.dispose();
    }
  });

  test('scaledDotProductAttention with NaN and ±Infinity in Q, K and V completes; the next call is correct', async () => {
    const H = 4,
      Dh = 8,
      Sq = 17,
      Skv = 23;
    const q = poisoned(H * Sq * Dh, 13, Number.NaN, [3]);
    const k = poisoned(H * Skv * Dh, 14, Infinity, [50]);
    const v = poisoned(H * Skv * Dh, 15, -Infinity, [60]);
    const options = { batchSize: 1, numHeads: H, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, needWeights: true };
    await survives('sdpa', () => engines.gpu.scaledDotProductAttention(q, k, v, options), H * Sq * Dh, H * Sq * Skv);
    const clean = [q, k, v].map((t, i) => uniform(t.length, 1, mulberry32(16 + i)));
    const g = await within(
      HANG_MS,
      'sdpa next',
      withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(clean[0], clean[1], clean[2], options)),
    );
    const c = await engines.cpu.scaledDotProductAttention(clean[0], clean[1], clean[2], options);
    expectClose(g.output, c.output, f32Tolerance([Dh, Skv]), 'sdpa: the next call');
  });
});
