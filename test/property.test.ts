// Property-based tests (fast-check): random layers and calls, WebGPU against the CPU backend, and
// random garbage arguments against the validation layer.
//
// Reproducible: every property runs from one seed, FC_SEED from the environment or a fixed default,
// logged at the start. On failure fast-check prints the seed, the path and the (shrunk)
// counterexample; replay with FC_SEED=<seed>. FC_NUM_RUNS=<n> runs every property n times instead
// (a longer hunt):
//
//   FC_SEED=123 FC_NUM_RUNS=2000 XDG_RUNTIME_DIR=/tmp npx vitest run test/property.test.ts

import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  AttentionError,
  type AttentionEngine,
  type ForwardOptions,
  type ForwardResult,
  type MultiHeadAttentionConfig,
  referenceMultiHeadAttention,
  type StateDict,
  type ScaledDotProductAttentionOptions,
} from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import type { KeysOf } from '../src/validate.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const DEFAULT_SEED = 20_240_611;
const SEED = (() => {
  const s = process.env.FC_SEED;
  if (s === undefined || s === '') return DEFAULT_SEED;
  const n = Number(s);
  if (!Number.isInteger(n)) throw new Error(`FC_SEED must be an integer; got ${JSON.stringify(s)}`);
  return n;
})();
console.log(`property.test.ts: fast-check seed ${SEED}${process.env.FC_SEED ? ' (from FC_SEED)' : ' (default; set FC_SEED to change)'}`);

/** FC_NUM_RUNS, if set, replaces every property's number of runs (for a longer hunt). */
const NUM_RUNS = process.env.FC_NUM_RUNS ? Number(process.env.FC_NUM_RUNS) : undefined;

/** Options of every fc.assert here. */
const params = (numRuns: number) => ({ seed: SEED, numRuns: NUM_RUNS ?? numRuns, verbose: true as const });

const engines = useEngines();

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// Random layers and calls. A case is plain data (printed as the counterexample); its tensors are
// drawn from `seed` with the engine's own seeded generator.
// ─────────────────────────────────────────────────────────────────────────────────────────────────

/** `arb` with probability `p`, else null. */
function sometimes<T>(arb: fc.Arbitrary<T>, p: number): fc.Arbitrary<T | null> {
  const w = Math.round(p * 100);
  return fc.oneof({ weight: 100 - w, arbitrary: fc.constant(null) }, { weight: w, arbitrary: arb });
}

const HEAD_DIMS = [4, 8, 12, 20, 32, 64] as const;
const CHANNELS = [4, 8, 12, 20, 32, 64] as const;

/** Divisors of n, largest first (so shrinking goes towards G = H). */
function divisors(n: number): number[] {
  return Array.from({ length: n }, (_, i) => n - i).filter((d) => n % d === 0);
}

interface MaskSpec {
  kind: 'float' | 'bool';
  perHead: boolean;
  pMasked: number;
  extreme?: number;
}

interface Case {
  seed: number;
  H: number;
  gPick: number;
  Dh: number;
  bias: boolean;
  mode: 'self' | 'cross' | 'packed';
  B: number;
  Sq: number;
  Skv: number;
  /** Cross-attention: kdim, vdim (null = embedDim; then q/k/v share in_proj_weight). */
  kdim: number | null;
  vdim: number | null;
  sameKV: boolean;
  /** Packed: the sequence lengths. */
  lengths: number[];
  isCausal: boolean;
  window: number | null;
  /** Key padding: probability of a padded key (percent). */
  padding: number | null;
  attnMask: MaskSpec | null;
  headMask: { perBatch: boolean } | null;
  needWeights: boolean;
}

const maskSpec = (extremes: fc.Arbitrary<number | undefined>) =>
  fc.record({
    kind: fc.constantFrom('float' as const, 'bool' as const),
    perHead: fc.boolean(),
    pMasked: fc.constantFrom(0, 10, 30, 60, 100),
    extreme: extremes,
  });

function caseArb(o: { window?: fc.Arbitrary<number>; maskExtremes?: fc.Arbitrary<number | undefined> } = {}): fc.Arbitrary<Case> {
  return fc.record({
    seed: fc.integer({ min: 0, max: 0x7fffffff }),
    H: fc.integer({ min: 1, max: 8 }),
    gPick: fc.nat({ max: 7 }),
    Dh: fc.constantFrom(...HEAD_DIMS),
    bias: fc.boolean(),
    mode: fc.oneof(
      { weight: 5, arbitrary: fc.constant('self' as const) },
      { weight: 3, arbitrary: fc.constant('cross' as const) },
      { weight: 2, arbitrary: fc.constant('packed' as const) },
    ),
    B: fc.integer({ min: 1, max: 3 }),
    Sq: fc.integer({ min: 1, max: 70 }),
    Skv: fc.integer({ min: 1, max: 70 }),
    kdim: sometimes(fc.constantFrom(...CHANNELS), 0.4),
    vdim: sometimes(fc.constantFrom(...CHANNELS), 0.4),
    sameKV: fc.boolean(),
    lengths: fc.array(fc.integer({ min: 1, max: 70 }), { minLength: 1, maxLength: 4 }),
    isCausal: fc.boolean(),
    window: sometimes(o.window ?? fc.integer({ min: 1, max: 80 }), 0.3),
    padding: sometimes(fc.constantFrom(10, 30, 60, 100), 0.3),
    attnMask: sometimes(maskSpec(o.maskExtremes ?? fc.constant(undefined)), 0.35),
    headMask: sometimes(fc.record({ perBatch: fc.boolean() }), 0.2),
    needWeights: fc.boolean(),
  });
}

function bits(n: number, rng: () => number, percent: number): Uint8Array {
  return Uint8Array.from({ length: n }, () => (rng() * 100 < percent ? 1 : 0));
}

interface Built {
  config: MultiHeadAttentionConfig;
  stateDict: StateDict;
  query: Float32Array;
  options: ForwardOptions;
  /** The longest key sequence (for the tolerances). */
  Skv: number;
}

/** Turns a case into a layer and a call; options a mode cannot take are left out. */
function build(c: Case): Built {
  const H = c.H;
  const G = divisors(H)[c.gPick % divisors(H).length];
  const E = H * c.Dh;
  const rng = mulberry32(c.seed ^ 0x5bd1e995);
  const cross = c.mode === 'cross';
  const kdim = cross ? (c.kdim ?? E) : E;
  const vdim = cross ? (c.vdim ?? E) : E;
  const config: MultiHeadAttentionConfig = { embedDim: E, numHeads: H, numKvHeads: G, bias: c.bias };
  if (kdim !== E || vdim !== E) Object.assign(config, { kdim, vdim });
  let stateDict: StateDict;
  if (kdim === E && vdim === E) {
    stateDict = randomStateDict({ embedDim: E, numHeads: H, numKvHeads: G, bias: c.bias }, c.seed);
  } else {
    const r = mulberry32(c.seed);
    stateDict = {
      q_proj_weight: uniform(H * c.Dh * E, Math.sqrt(3 / E), r),
      k_proj_weight: uniform(G * c.Dh * kdim, Math.sqrt(3 / kdim), r),
      v_proj_weight: uniform(G * c.Dh * vdim, Math.sqrt(3 / vdim), r),
      'out_proj.weight': uniform(E * E, 1 / Math.sqrt(E), r),
    };
    if (c.bias) {
      stateDict.in_proj_bias = uniform((H + 2 * G) * c.Dh, 0.1, r);
      stateDict['out_proj.bias'] = uniform(E, 0.1, r);
    }
  }
  const headMask = (n: number) => Float32Array.from({ length: n }, () => [1, 0, 0.5, 2, rng()][Math.floor(rng() * 5)]);

  if (c.mode === 'packed') {
    const cu = Int32Array.from([0, ...c.lengths.map((_, i) => c.lengths.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
    const T = cu[cu.length - 1];
    const options: ForwardOptions = { cuSeqlens: cu, isCausal: c.isCausal };
    if (c.window !== null) options.window = c.window;
    if (c.headMask) options.headMask = headMask(c.headMask.perBatch ? c.lengths.length * H : H);
    return { config, stateDict, query: uniform(T * E, 1, rng), options, Skv: Math.max(...c.lengths) };
  }

  const { B, Sq } = c;
  const Skv = cross ? c.Skv : Sq;
  const options: ForwardOptions = { batchSize: B, seqLen: Sq, isCausal: c.isCausal, needWeights: c.needWeights };
  const query = uniform(B * Sq * E, 1, rng);
  if (cross) {
    const key = uniform(B * Skv * kdim, 1, rng);
    const value = c.sameKV && kdim === vdim ? key : uniform(B * Skv * vdim, 1, rng);
    Object.assign(options, { key, value, kvSeqLen: Skv });
  }
  if (c.window !== null) options.window = c.window;
  if (c.padding !== null) options.keyPaddingMask = bits(B * Skv, rng, c.padding);
  if (c.attnMask) {
    const n = (c.attnMask.perHead ? B * H : 1) * Sq * Skv;
    const masked = bits(n, rng, c.attnMask.pMasked);
    if (c.attnMask.kind === 'bool') {
      options.attnMask = masked;
    } else {
      const fill = c.attnMask.extreme ?? -Infinity;
      options.attnMask = Float32Array.from(uniform(n, 2, rng), (v, i) => (masked[i] ? fill : v));
    }
  }
  if (c.headMask) options.headMask = headMask(c.headMask.perBatch ? B * H : H);
  return { config, stateDict, query, options, Skv };
}

/**
 * One case on both backends: WebGPU output never NaN, and equal to the CPU backend's within tolerance.
 * `logitCap`: logits at or beyond it (from huge finite mask values) are left out of max|logit|; such
 * a logit either loses to a normal one (probability 0 on both backends) or ties with the other huge
 * ones of its row (equal probabilities on both), so it adds no error of its own.
 */
async function checkCase(c: Case, logitCap = Infinity): Promise<void> {
  const { config, stateDict, query, options, Skv } = build(c);
  const E = config.embedDim;
  const a = engines.gpu.createMultiHeadAttention(config, stateDict);
  const b = engines.cpu.createMultiHeadAttention(config, stateDict);
  try {
    const g = await withErrorScopes(engines.gpu.device!, () => a.forward(query, options));
    const r = await b.forward(query, options);
    expect(g.output.length, 'output length').toBe(r.output.length);
    const nan = g.output.findIndex(Number.isNaN);
    expect(nan, `WebGPU output has a NaN at ${nan}`).toBe(-1);
    expectClose(g.output, r.output, f32Tolerance([config.kdim ?? E, Skv, E]), 'output');
    if ('needWeights' in options && options.needWeights) {
      const logits = referenceMultiHeadAttention(config, stateDict, query, options).scores!.filter((v) => Math.abs(v) < logitCap);
      expect(g.attentionWeights!.length, 'attentionWeights length').toBe(r.attentionWeights!.length);
      expectClose(g.attentionWeights!, r.attentionWeights!, probabilityTolerance(E, Skv, maxAbsFinite(logits)), 'attentionWeights');
    }
  } finally {
    a.dispose();
    b.dispose();
  }
}

describe('random layers and calls: WebGPU = CPU backend', () => {
  test('any layer (B 1–3, Sq/Skv 1–70, H 1–8, G | H, Dh 4…64, bias) and call (causal, window, padding, float/bool masks, head masks, weights, cross-attention, packed)', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb(), (c) => checkCase(c)),
      params(250),
    );
  }, 600_000);

  // Values the validation accepts but that sit at the edges.

  // A window far beyond any sequence: a caller's "no limit" (Number.MAX_SAFE_INTEGER, 2 ** 32, …).
  // Found (default seed): windows from 2³¹ on differ between the backends — e.g. B = Sq = 1,
  // window 2147483748: WebGPU output out_proj.bias (the row sees no key), CPU the normal result. The
  // validation accepts any positive integer, the kernels get it as a u32 uniform (2³² + k wraps to k:
  // 2³² is "no window" and drops the causal band a window implies, 2³² + 3 is a window of 3) and the
  // shader reads it as an i32 (2³¹ + k is negative: row i' sees no key once k > i' + 1).
  test('extreme but valid: huge windows', async () => {
    const arb = caseArb({ window: fc.constantFrom(1_000, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 100, 2 ** 32, 2 ** 32 + 3, Number.MAX_SAFE_INTEGER) }).map((c) => ({
      ...c,
      window: c.window ?? 2 ** 32,
    }));
    await fc.assert(
      fc.asyncProperty(arb, (c) => checkCase(c)),
      params(30),
    );
  }, 600_000);

  // Float masks that mask with a huge finite negative number instead of −Infinity, as Hugging Face
  // does (torch.finfo(float32).min = −3.4028234663852886e38). docs/ATTENTION-OPTIONS.md says a float mask is added
  // to the scores, −Infinity masks: a finite value is a score like any other, so a row whose every
  // key carries it still averages V (uniformly: the scores tie), as in PyTorch.
  // Found (default seed): with values ≤ −1e38 (flash_attention.wgsl's MASKED threshold; −1e30 is
  // fine) such a row gives probabilities 0 and output out_proj.bias on WebGPU, the V average on CPU.
  test('extreme but valid: float masks of huge finite negative numbers', async () => {
    const arb = caseArb({ maskExtremes: fc.constantFrom(-1e30, -1e38, -3.4028234663852886e38) }).map((c) => ({
      ...c,
      mode: c.mode === 'packed' ? ('self' as const) : c.mode,
      attnMask: { ...(c.attnMask ?? { perHead: false, pMasked: 100, extreme: -1e38 }), kind: 'float' as const },
    }));
    await fc.assert(
      fc.asyncProperty(arb, (c) => checkCase(c, 1e15)),
      params(30),
    );
  }, 600_000);
});

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// Garbage in: the validation layer throws only the engine's typed errors, and nothing reaches the GPU.
// ─────────────────────────────────────────────────────────────────────────────────────────────────

// The options garbage is made of: a chosen subset of each entry point's known keys (src/option-keys.ts
// has them all; options that change what a call returns, such as returnBuffer, stay out), typed so that
// a key renamed or removed from the options type fails to compile here.
const FORWARD_KEYS: KeysOf<ForwardOptions>[] = [
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
  'dropout',
];
const SDPA_KEYS: KeysOf<ScaledDotProductAttentionOptions>[] = [
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
];
const CONFIG_KEYS: (keyof MultiHeadAttentionConfig)[] = ['embedDim', 'numHeads', 'numKvHeads', 'kdim', 'vdim', 'bias', 'dropout'];
const MISSPELLINGS = [
  'is_causal',
  'iscausal',
  'IsCausal',
  'causal',
  'batch_size',
  'batchsize',
  'BatchSize',
  'seq_len',
  'seqlen',
  'need_weights',
  'needweights',
  'attn_mask',
  'mask',
  'key_padding_mask',
  'keyPadingMask',
  'kv_seq_len',
  'cu_seqlens',
  'cuSeqLens',
  'head_mask',
  'windows',
  'dropout_p',
  'num_heads',
  'embed_dim',
  'embedDims',
  'numHead',
  'num_kv_heads',
  'head_dim',
  'k_dim',
  'Bias',
  '__proto__',
  'constructor',
  'toString',
  'valueOf',
  'hasOwnProperty',
  '',
  ' ',
  'seqLen ',
];
const TYPED = [Float32Array, Float64Array, Uint8Array, Int8Array, Int32Array, Uint32Array, Uint16Array, Uint8ClampedArray] as const;

/** Values: anything at all, numbers at the edges, typed arrays of any kind and length. */
const garbageValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({
    maxDepth: 2,
    withBigInt: true,
    withBoxedValues: true,
    withDate: true,
    withMap: true,
    withSet: true,
    withNullPrototype: true,
    withObjectString: true,
    withSparseArray: true,
    withTypedArray: true,
  }),
  fc.constantFrom(
    undefined,
    null,
    true,
    false,
    0,
    -0,
    1,
    2,
    3,
    4,
    6,
    8,
    48,
    -1,
    0.5,
    1.5,
    Number.NaN,
    Infinity,
    -Infinity,
    2 ** 31,
    2 ** 32,
    2 ** 53,
    Number.MAX_VALUE,
    Number.MIN_VALUE,
    '2',
    '',
    [],
    {},
    10n,
    () => 1,
    Symbol('x'),
  ),
  fc.tuple(fc.constantFrom(...TYPED), fc.nat({ max: 150 }), fc.constantFrom(0, 1, Number.NaN)).map(([T, n, v]) => new T(n).fill(v as never)),
  fc.array(fc.integer({ min: -2, max: 60 }), { maxLength: 5 }).map((a) => Int32Array.from(a)),
);

/** Objects of known names (valid-looking or garbage values), misspelt names and random names. */
function garbageObject(known: string[], base: Record<string, unknown>): fc.Arbitrary<unknown> {
  const key = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...known) },
    { weight: 3, arbitrary: fc.constantFrom(...MISSPELLINGS) },
    { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
  );
  const entries = fc.array(fc.tuple(key, garbageValue), { maxLength: 5 });
  return fc.oneof(
    { weight: 8, arbitrary: fc.tuple(fc.boolean(), entries).map(([withBase, e]) => Object.fromEntries([...(withBase ? Object.entries(base) : []), ...e])) },
    { weight: 1, arbitrary: garbageValue },
  );
}

/**
 * Calls `fn` on both backends. Each either resolves or rejects with an AttentionError (the same
 * class and message on both: the checks are shared); on WebGPU a rejected call leaves stats()
 * unchanged and the device reports no error. Returns whether the call was accepted.
 */
async function onlyTypedErrors<T>(fn: (engine: AttentionEngine) => Promise<T>, where: string): Promise<{ gpu: T; cpu: T } | null> {
  const outcome = async (engine: AttentionEngine) => {
    try {
      // fn may also throw synchronously (createMultiHeadAttention does): both count.
      return { value: await fn(engine), error: undefined };
    } catch (error) {
      return { value: undefined as T, error };
    }
  };
  const before = engines.gpu.stats();
  const g = await withErrorScopes(engines.gpu.device!, () => outcome(engines.gpu));
  const c = await outcome(engines.cpu);
  for (const [name, o] of [
    ['webgpu', g],
    ['cpu', c],
  ] as const) {
    if (o.error === undefined) continue;
    if (!(o.error instanceof AttentionError)) {
      throw new Error(`${name}: threw ${Object.prototype.toString.call(o.error)} ${String((o.error as Error)?.stack ?? o.error)}; only AttentionErrors are allowed`);
    }
    expect(o.error.message, `${name}: the message names the entry point`).toContain(where);
  }
  if (g.error !== undefined) expect(engines.gpu.stats(), 'a refused call holds no new GPU memory').toEqual(before);
  // Both backends refuse the same calls with the same words, except what only WebGPU refuses: head
  // sizes or channels its kernels do not take, and device limits.
  const gpuOnly =
    g.error !== undefined &&
    c.error === undefined &&
    ((g.error as Error).name === 'DeviceLimitError' || ((g.error as Error).name === 'UnsupportedError' && (g.error as Error).message.includes('on the WebGPU backend')));
  if (!gpuOnly) {
    expect(g.error === undefined, 'accepted on WebGPU ⇔ accepted on the CPU').toBe(c.error === undefined);
    if (g.error) expect((g.error as Error).message).toBe((c.error as Error).message);
  }
  return g.error === undefined && c.error === undefined ? { gpu: g.value, cpu: c.value } : null;
}

/** An accepted call's arrays have the lengths the call implies, on both backends. */
function expectLengths(r: { gpu: ForwardResult; cpu: ForwardResult }, outputLength: number): void {
  for (const x of [r.gpu, r.cpu]) {
    expect(x.output).toBeInstanceOf(Float32Array);
    expect(x.output.length, 'output length').toBe(outputLength);
    expect(x.attentionWeights?.length, 'attentionWeights length').toBe(r.cpu.attentionWeights?.length);
  }
}

describe('garbage arguments: typed errors only, nothing reaches the GPU', () => {
  const config = { embedDim: 8, numHeads: 2 };
  const stateDict = randomStateDict(config, 3);
  const query = uniform(2 * 3 * 8, 1, mulberry32(1)); // [B=2, S=3, E=8]
  const queryArb: fc.Arbitrary<unknown> = fc.oneof(
    { weight: 6, arbitrary: fc.constant(query) },
    { weight: 2, arbitrary: fc.nat({ max: 100 }).map((n) => uniform(n, 1, mulberry32(n))) },
    { weight: 1, arbitrary: garbageValue },
  );
  test('MultiHeadAttention.forward(query, options)', async () => {
    let accepted = 0;
    let runs = 0;
    const gl = () => engines.gpu.createMultiHeadAttention(config, stateDict);
    const layers = new Map<AttentionEngine, ReturnType<typeof gl>>();
    try {
      layers.set(engines.gpu, gl());
      layers.set(engines.cpu, engines.cpu.createMultiHeadAttention(config, stateDict));
      await fc.assert(
        fc.asyncProperty(queryArb, garbageObject(FORWARD_KEYS, { batchSize: 2, seqLen: 3 }), async (q, options) => {
          const ok = await onlyTypedErrors((e) => layers.get(e)!.forward(q as Float32Array, options as ForwardOptions), 'MultiHeadAttention.forward');
          runs++;
          if (ok) {
            accepted++;
            expectLengths(ok, (q as Float32Array).length); // output [B, S, E] (packed [T, E]), as the query
          }
        }),
        params(400),
      );
    } finally {
      for (const l of layers.values()) l.dispose();
    }
    console.log(`  forward: ${accepted} of ${runs} garbage calls were valid and ran`);
  }, 300_000);

  test('createMultiHeadAttention(config, stateDict)', async () => {
    const sdArb = fc.oneof(
      { weight: 3, arbitrary: fc.constant(stateDict) },
      {
        weight: 2,
        arbitrary: garbageObject(['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias', 'q_proj_weight', 'k_proj_weight', 'v_proj_weight'], stateDict),
      },
    );
    await fc.assert(
      fc.asyncProperty(garbageObject(CONFIG_KEYS, config), sdArb, async (cfg, sd) => {
        await onlyTypedErrors(async (e) => {
          const layer = e.createMultiHeadAttention(cfg as MultiHeadAttentionConfig, sd as StateDict);
          layer.dispose();
        }, 'createMultiHeadAttention');
      }),
      params(300),
    );
  }, 300_000);

  test('scaledDotProductAttention(query, key, value, options)', async () => {
    const t = uniform(1 * 2 * 3 * 4, 1, mulberry32(2)); // [B=1, H=2, S=3, Dh=4]
    const tensor: fc.Arbitrary<unknown> = fc.oneof({ weight: 6, arbitrary: fc.constant(t) }, { weight: 1, arbitrary: garbageValue });
    await fc.assert(
      fc.asyncProperty(tensor, tensor, tensor, garbageObject(SDPA_KEYS, { batchSize: 1, numHeads: 2, seqLen: 3, headDim: 4 }), async (q, k, v, options) => {
        const ok = await onlyTypedErrors(
          (e) => e.scaledDotProductAttention(q as Float32Array, k as Float32Array, v as Float32Array, options as ScaledDotProductAttentionOptions),
          'scaledDotProductAttention',
        );
        if (ok) expectLengths(ok, (q as Float32Array).length); // output [B, H, Sq, Dh], as the query
      }),
      params(300),
    );
  }, 300_000);
});
