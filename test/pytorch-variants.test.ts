// PyTorch as an independent oracle for the attention options: key padding masks, float / boolean /
// −∞ attention masks, cross-attention (Skv ≠ Sq, kdim/vdim ≠ E), end-aligned causal, GQA / MQA,
// sliding windows, head masks, packed variable-length batches (cuSeqlens), rows that see no key, and
// engine.scaledDotProductAttention. The expected values come from scripts/make_variant_fixtures.py
// (float64, checked there against torch.nn.MultiheadAttention) in test/fixtures/pytorch-variants/*.json,
// and share no code with the engine. All three backends are checked against them.

import { describe, expect, test } from 'vitest';
import type { AttentionEngine } from '../src/index.ts';
import type { ForwardOptions, MultiHeadAttentionConfig, ScaledDotProductAttentionOptions, StateDict } from '../src/index.ts';
import { compareArrays, expectClose, maxAbsFinite, outputTolerance, probabilityTolerance, type Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { withErrorScopes } from './helpers/gpu.ts';

type ArrayKind = 'float32' | 'uint8' | 'int32';
type JsonValue = number | boolean | string | (number | string)[];

interface OptionsFixture {
  name: string;
  description: string;
  torch_version: string;
  /** 'mha': MultiHeadAttention.forward; 'sdpa': engine.scaledDotProductAttention. */
  kind: 'mha' | 'sdpa';
  /** mha: createMultiHeadAttention's config; sdpa: {numHeads, numKvHeads, headDim} (also in options). */
  config: Record<string, number | boolean>;
  /** The forward options; arrays named in `types` become typed arrays, `types` itself is dropped. */
  options: Record<string, JsonValue> & { types?: Record<string, ArrayKind> };
  /** The shape of every array in the file. */
  shapes: Record<string, number[]>;
  /** The largest finite |QKᵀ/√Dh + attnMask| of the case. */
  maxAbsLogit: number;
  /** How many (b, h, i) rows see no key. */
  fullyMaskedRows: number;
  stateDict?: Record<string, number[]>;
  /** mha [B, Sq, E] (varlen [T, E]); sdpa [B, H, Sq, Dh]. */
  query: number[];
  /** sdpa only: [B, G, Skv, Dh]. */
  key?: number[];
  value?: number[];
  /** float64: mha [B, Sq, E] (varlen [T, E]); sdpa [B, H, Sq, Dh]. */
  output: number[];
  /** float64 [B, H, Sq, Skv], head mask included; small cases only. */
  attentionWeights?: number[];
}

/** How the fixtures write −∞ in float32 arrays (JSON has no Infinity). */
const NEG_INF = '-Infinity';

// Read at collection time so that each fixture gets its own tests; a failure to read (or an empty
// folder) is reported by the 'present and well formed' test below.
const fixtureSet = loadJsonFixtures<Omit<OptionsFixture, 'name'>>(
  new URL('./fixtures/pytorch-variants/', import.meta.url),
  'Regenerate them with `/usr/bin/python3 scripts/make_variant_fixtures.py`.',
);
const { fixtures } = fixtureSet;

const engines = useEngines('webgpu', 'cpu', 'wasm');

// ------------------------------------------------------------------------------------------------
// JSON → the engine's arguments.

function toTyped(kind: ArrayKind, values: readonly (number | string)[], what: string): Float32Array | Uint8Array | Int32Array {
  const num = (v: number | string): number => {
    if (typeof v === 'number' && Number.isFinite(v)) return v;
    if (v === NEG_INF && kind === 'float32') return -Infinity;
    throw new Error(`${what}: unexpected value ${JSON.stringify(v)} in a ${kind} array`);
  };
  const ints = (lo: number, hi: number) => (v: number | string) => {
    const n = num(v);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new Error(`${what}: ${n} is not a ${kind}`);
    return n;
  };
  switch (kind) {
    case 'float32':
      return Float32Array.from(values, num);
    case 'uint8':
      return Uint8Array.from(values, ints(0, 255));
    case 'int32':
      return Int32Array.from(values, ints(-(2 ** 31), 2 ** 31 - 1));
    default:
      throw new Error(`${what}: unknown array kind ${JSON.stringify(kind)}`);
  }
}

/** The options as the engine takes them: typed arrays for the names in `types`, `types` dropped. */
function optionsOf(f: OptionsFixture): Record<string, unknown> {
  const { types = {}, ...rest } = f.options;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) {
    if (Array.isArray(v)) {
      const kind = types[k];
      if (!kind) throw new Error(`${f.name}: options.${k} is an array but options.types.${k} is missing`);
      out[k] = toTyped(kind, v, `${f.name} options.${k}`);
    } else {
      out[k] = v;
    }
  }
  return out;
}

const float32 = (v: number[]) => Float32Array.from(v);
const stateDictOf = (f: OptionsFixture): StateDict => Object.fromEntries(Object.entries(f.stateDict ?? {}).map(([k, v]) => [k, float32(v)]));

/** Skv: the keys a query row reduces over (the longest sequence of a packed batch). */
function kvLength(f: OptionsFixture): number {
  const o = f.options;
  if (Array.isArray(o.cuSeqlens)) {
    const cu = o.cuSeqlens as number[];
    return Math.max(...cu.slice(1).map((c, i) => c - cu[i]));
  }
  return (o.kvSeqLen as number | undefined) ?? (o.seqLen as number);
}

// ------------------------------------------------------------------------------------------------
// Tolerances (the same rules as test/pytorch-fixtures.test.ts; inputs are float32 values read back
// bit-exactly, so input rounding is identical on both sides).
//
// CPU backend: the float64 reference rounded once to float32: rtol 2⁻²³ (twice the rounding bound)
// and atol 1e-12 for values near 0, where the float64 disagreement with PyTorch (~1e-15) is all.
const CPU_TOLERANCE: Tolerance = { atol: 1e-12, rtol: 2 ** -23 };

// WebGPU outputs: float32 reductions chained. mha: the projections (length E for Q, kdim for K,
// vdim for V; the longest counts), the P·V sum over Skv keys, W_O over E. sdpa: QKᵀ over Dh, P·V over
// Skv. Plus the logit-size term (outputTolerance): with logits near 850 (the ×25 cases) a float32
// logit is only known to ~1e-4, and PyTorch's own float32 module misses these outputs by more than
// the engine does.
function gpuOutputTolerance(f: OptionsFixture): Tolerance {
  const maxOut = maxAbsFinite(f.output);
  if (f.kind === 'sdpa') return outputTolerance([f.config.headDim as number, kvLength(f)], f.maxAbsLogit, maxOut);
  const E = f.config.embedDim as number;
  const inLength = Math.max(E, (f.config.kdim as number | undefined) ?? E, (f.config.vdim as number | undefined) ?? E);
  return outputTolerance([inLength, kvLength(f), E], f.maxAbsLogit, maxOut);
}

// WebGPU probabilities: the logits' projection (E for Q, kdim for K; sdpa: none, the dot product is
// over Dh), the softmax sum over Skv, and the logit-size term from maxAbsLogit.
function gpuWeightTolerance(f: OptionsFixture): Tolerance {
  if (f.kind === 'sdpa') return probabilityTolerance(f.config.headDim as number, kvLength(f), f.maxAbsLogit);
  const E = f.config.embedDim as number;
  return probabilityTolerance(Math.max(E, (f.config.kdim as number | undefined) ?? E), kvLength(f), f.maxAbsLogit);
}

// ------------------------------------------------------------------------------------------------

const prod = (shape: number[]) => shape.reduce((a, b) => a * b, 1);

function checkFixture(f: OptionsFixture): void {
  const where = (what: string) => `${f.name}: ${what}`;
  expect(['mha', 'sdpa'], where('kind')).toContain(f.kind);
  expect(f.output.length, where('output is not empty')).toBeGreaterThan(0);
  expect(Number.isFinite(f.maxAbsLogit) && f.maxAbsLogit >= 0, where('maxAbsLogit')).toBe(true);
  const arrays: Record<string, readonly unknown[]> = { query: f.query, output: f.output };
  if (f.key) arrays.key = f.key;
  if (f.value) arrays.value = f.value;
  if (f.attentionWeights) arrays.attentionWeights = f.attentionWeights;
  for (const [k, v] of Object.entries(f.stateDict ?? {})) arrays[k] = v;
  for (const [k, v] of Object.entries(f.options)) if (Array.isArray(v)) arrays[k] = v;
  // every array has a shape, and its length is that shape's size
  expect(Object.keys(f.shapes).sort(), where('shapes name every array')).toEqual(Object.keys(arrays).sort());
  for (const [k, v] of Object.entries(arrays)) expect(v.length, where(`${k} ${JSON.stringify(f.shapes[k])}`)).toBe(prod(f.shapes[k]));
  // only float32 masks may hold the −∞ marker; expected values are finite
  for (const [k, v] of Object.entries(arrays)) {
    const markerOk = f.options.types?.[k] === 'float32' && k === 'attnMask';
    const ok = v.every((x) => (typeof x === 'number' && Number.isFinite(x)) || (markerOk && x === NEG_INF));
    expect(ok, where(`${k}: finite numbers${markerOk ? ' or "-Infinity"' : ''}`)).toBe(true);
  }
  optionsOf(f); // every array option has a known kind and valid values
  if (f.kind === 'mha') {
    const E = f.config.embedDim as number;
    expect(f.stateDict, where('stateDict')).toBeDefined();
    expect(f.shapes.output.at(-1), where('output rows are E wide')).toBe(E);
    if (f.options.cuSeqlens) {
      const cu = f.options.cuSeqlens as number[];
      expect(cu[0], where('cuSeqlens[0]')).toBe(0);
      expect(f.query.length, where('query [T, E]')).toBe(cu.at(-1)! * E);
      expect(f.options.batchSize ?? f.options.seqLen, where('varlen passes no batchSize/seqLen')).toBeUndefined();
      expect(f.attentionWeights, where('no weights for varlen')).toBeUndefined();
    } else {
      const { batchSize: B, seqLen: Sq } = f.options as { batchSize: number; seqLen: number };
      expect(f.query.length, where('query [B, Sq, E]')).toBe(B * Sq * E);
    }
  } else {
    const o = f.options as Record<string, number>;
    expect(f.key && f.value, where('sdpa has key and value')).toBeTruthy();
    expect(f.query.length, where('query [B, H, Sq, Dh]')).toBe(o.batchSize * o.numHeads * o.seqLen * o.headDim);
    expect(f.output.length, where('output [B, H, Sq, Dh]')).toBe(f.query.length);
  }
}

/** Set FIXTURE_ERRORS=1 to print the measured errors of every comparison. */
function report(backend: string, f: OptionsFixture, what: string, actual: ArrayLike<number>, expected: number[], tol: Tolerance): void {
  if (!process.env.FIXTURE_ERRORS) return;
  const r = compareArrays(actual, expected, tol);
  let worst = 0; // max over elements of |err| / (atol + rtol·|ref|): below 1 passes
  let at = -1;
  for (let i = 0; i < actual.length; i++) {
    const ratio = Math.abs(actual[i] - expected[i]) / (tol.atol + tol.rtol * Math.abs(expected[i]));
    if (!(ratio <= worst)) [worst, at] = [ratio, i];
  }
  console.log(
    `${backend.padEnd(6)} ${f.name.padEnd(34)} ${what.padEnd(7)} maxAbs ${r.maxAbs.toExponential(2)} maxRel ${r.maxRel.toExponential(2)} ` +
      `worst err/allowed ${worst.toFixed(3)} at [${at}] (atol ${tol.atol.toExponential(2)}, rtol ${tol.rtol.toExponential(2)})`,
  );
}

interface RunResult {
  output: Float32Array;
  attentionWeights?: Float32Array;
}

/** One call of the case on `engine`; `wrap` puts GPU work inside error scopes. */
async function runCase(engine: AttentionEngine, f: OptionsFixture, needWeights: boolean, wrap: <T>(fn: () => Promise<T>) => Promise<T>): Promise<RunResult> {
  const options = optionsOf(f);
  if (needWeights) options.needWeights = true;
  if (f.kind === 'sdpa') {
    const q = float32(f.query);
    const k = float32(f.key!);
    const v = float32(f.value!);
    return wrap(() => engine.scaledDotProductAttention(q, k, v, options as unknown as ScaledDotProductAttentionOptions));
  }
  const layer = engine.createMultiHeadAttention(f.config as unknown as MultiHeadAttentionConfig, stateDictOf(f));
  try {
    const query = float32(f.query);
    return await wrap(() => layer.forward(query, options as unknown as ForwardOptions));
  } finally {
    layer.dispose();
  }
}

async function checkBackend(
  backend: 'cpu' | 'webgpu' | 'wasm',
  engine: AttentionEngine,
  f: OptionsFixture,
  outTol: Tolerance,
  weightTol: Tolerance,
  wrap: <T>(fn: () => Promise<T>) => Promise<T>,
): Promise<void> {
  const plain = await runCase(engine, f, false, wrap);
  report(backend, f, 'output', plain.output, f.output, outTol);
  expectClose(plain.output, f.output, outTol, `${f.name} ${backend} output`);
  expect(plain.attentionWeights, `${f.name} ${backend}: no attentionWeights without needWeights`).toBeUndefined();
  if (f.attentionWeights) {
    const withWeights = await runCase(engine, f, true, wrap);
    expect(withWeights.attentionWeights, `${f.name} ${backend}: attentionWeights with needWeights`).toBeDefined();
    report(backend, f, 'output+w', withWeights.output, f.output, outTol);
    expectClose(withWeights.output, f.output, outTol, `${f.name} ${backend} output (needWeights)`);
    report(backend, f, 'weights', withWeights.attentionWeights!, f.attentionWeights, weightTol);
    expectClose(withWeights.attentionWeights!, f.attentionWeights, weightTol, `${f.name} ${backend} attentionWeights`);
  }
}

test('the PyTorch attention-option fixtures are present and well formed', () => {
  expectFixturesPresent(fixtureSet);
  for (const f of fixtures) checkFixture(f);
});

// describe.each over an empty list would silently run nothing; the test above fails in that case.
describe.each(fixtures.map((f) => [f.name, f] as const))('%s', (_name, f) => {
  test('cpu backend', async () => {
    await checkBackend('cpu', engines.cpu, f, CPU_TOLERANCE, CPU_TOLERANCE, (fn) => fn());
  });

  // float32 on the CPU: the same tolerances as WebGPU's float32 path.
  test('wasm backend', async () => {
    await checkBackend('wasm', engines.wasm, f, gpuOutputTolerance(f), gpuWeightTolerance(f), (fn) => fn());
  });

  // Every case, kdim/vdim that are not multiples of 4 included (padded inside the engine, src/webgpu/padding.ts).
  test('webgpu backend', async () => {
    await checkBackend('webgpu', engines.gpu, f, gpuOutputTolerance(f), gpuWeightTolerance(f), (fn) => withErrorScopes(engines.gpu.device!, fn));
  });

  // A packed batch has no [B, H, Sq, Skv] to return: needWeights with cuSeqlens is refused.
  if (f.options.cuSeqlens) {
    test('needWeights with cuSeqlens is refused', async () => {
      for (const engine of [engines.cpu, engines.gpu, engines.wasm]) {
        await expect(
          runCase(engine, f, true, (fn) => fn()),
          `${engine.backend}`,
        ).rejects.toThrow(/needWeights/);
      }
    });
  }
});
