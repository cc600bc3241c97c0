// Half-precision arrays in and out: query, key and value of forward and scaledDotProductAttention may
// be Uint16Arrays of IEEE binary16 bits (or Float16Arrays where the runtime has them), widened to
// float32 exactly whatever the engine's precision; `outputType: 'f16'` returns the output as binary16
// bits (rounded to nearest even). Float32Array in → Float32Array out is unchanged. Bad arguments
// are refused with typed errors before any GPU work.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type AttentionEngine, createAttentionEngine, InvalidArgumentError, referenceMultiHeadAttention, ShapeMismatchError, UnsupportedError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { Usage } from '../src/webgpu/buffers.ts';
import { fromF16, toF16 } from '../src/util/f16.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes, watchDevice } from './helpers/gpu.ts';

const engines = useEngines();
let half: AttentionEngine;
beforeAll(async () => {
  half = await createAttentionEngine({ backend: 'webgpu', precision: 'f16' });
  watchDevice(half.device!);
});
afterAll(() => half?.dispose());

const config = { embedDim: 32, numHeads: 4 };
const B = 2;
const S = 7;
const E = config.embedDim;
const Dh = E / config.numHeads;
/** Values that are exact in binary16, as bits and as float32. */
function halfInput(n: number, seed: number): { bits: Uint16Array; values: Float32Array } {
  const bits = toF16(uniform(n, 1, mulberry32(seed)));
  return { bits, values: fromF16(bits) };
}

async function run<T>(engine: AttentionEngine, fn: () => Promise<T>): Promise<T> {
  return engine.device ? withErrorScopes(engine.device, fn) : fn();
}

describe.each(['cpu', 'webgpu'] as const)('%s backend, precision f32', (backend) => {
  test('forward: a Uint16Array query gives what its float32 values give; outputType f16 rounds that output', async () => {
    const engine = engines.of(backend);
    const sd = randomStateDict(config, 3);
    const mha = engine.createMultiHeadAttention(config, sd);
    try {
      const x = halfInput(B * S * E, 1);
      const options = { batchSize: B, seqLen: S, isCausal: true };
      const fromBits = await run(engine, () => mha.forward(x.bits, options));
      const fromValues = await run(engine, () => mha.forward(x.values, options));
      expect(fromBits.output).toBeInstanceOf(Float32Array);
      expectClose(fromBits.output, fromValues.output, { atol: 0, rtol: 0 }, 'half bits vs their float32 values');
      const ref = referenceMultiHeadAttention(config, sd, x.values, options);
      expectClose(fromBits.output, ref.output, f32Tolerance([E, S, E]), 'against the float64 reference');

      const narrowed = await run(engine, () => mha.forward(x.bits, { ...options, outputType: 'f16', needWeights: true }));
      expect(narrowed.output).toBeInstanceOf(Uint16Array);
      expect(narrowed.output.length).toBe(B * S * E);
      expect(narrowed.attentionWeights).toBeInstanceOf(Float32Array);
      // Each half is the float32 output rounded to nearest: within half an ulp of binary16 (2^-11 relative) of it.
      expectClose(fromF16(narrowed.output), fromValues.output, { atol: 2 ** -25, rtol: 2 ** -11 }, 'f16 output vs f32 output');
      const explicit = await run(engine, () => mha.forward(x.values, { ...options, outputType: 'f32' }));
      expect(explicit.output).toBeInstanceOf(Float32Array);
    } finally {
      mha.dispose();
    }
  });

  test('cross-attention: half key and value; a Float32Array query beside them', async () => {
    const engine = engines.of(backend);
    const sd = randomStateDict(config, 4);
    const mha = engine.createMultiHeadAttention(config, sd);
    try {
      const q = halfInput(B * S * E, 2).values;
      const k = halfInput(B * 5 * E, 3);
      const v = halfInput(B * 5 * E, 4);
      const options = { batchSize: B, seqLen: S, kvSeqLen: 5 };
      const a = await run(engine, () => mha.forward(q, { ...options, key: k.bits, value: v.bits }));
      const b = await run(engine, () => mha.forward(q, { ...options, key: k.values, value: v.values }));
      expectClose(a.output, b.output, { atol: 0, rtol: 0 }, 'cross-attention, half key/value');
    } finally {
      mha.dispose();
    }
  });

  test('scaledDotProductAttention: half query, key and value, half output', async () => {
    const engine = engines.of(backend);
    const [q, k, v] = [1, 2, 3].map((seed) => halfInput(B * 2 * S * Dh, seed));
    const options = { batchSize: B, numHeads: 2, seqLen: S, headDim: Dh, isCausal: true };
    const a = await run(engine, () => engine.scaledDotProductAttention(q.bits, k.bits, v.bits, { ...options, outputType: 'f16' }));
    const b = await run(engine, () => engine.scaledDotProductAttention(q.values, k.values, v.values, options));
    expect(a.output).toBeInstanceOf(Uint16Array);
    expect(b.output).toBeInstanceOf(Float32Array);
    expect(Array.from(a.output)).toEqual(Array.from(toF16(b.output)));
  });
});

test("precision f16: half in, half out, within the f16 tolerance of the reference; outputType 'f16' returns the GPU's halves", async () => {
  expect(half.precision).toBe('f16');
  const sd = randomStateDict(config, 5);
  const mha = half.createMultiHeadAttention(config, sd);
  try {
    const x = halfInput(B * S * E, 6);
    const options = { batchSize: B, seqLen: S };
    const out = await withErrorScopes(half.device!, () => mha.forward(x.bits, { ...options, outputType: 'f16' }));
    const wide = await withErrorScopes(half.device!, () => mha.forward(x.bits, options));
    expect(out.output).toBeInstanceOf(Uint16Array);
    // The f32 readback widens the GPU's float16 values exactly, so narrowing it again gives them back.
    expect(Array.from(out.output)).toEqual(Array.from(toF16(wide.output)));
    const ref = referenceMultiHeadAttention(config, sd, x.values, { ...options, needWeights: true });
    expectClose(fromF16(out.output), ref.output, f16Tolerance([E, S, E], maxAbsFinite(ref.output), maxAbsFinite(ref.scores!)), 'f16 output');
  } finally {
    mha.dispose();
  }
});

test("a Float16Array (the runtime's, or a stand-in where it has none, as on Node 20) is widened like half bits", async () => {
  const native = (globalThis as { Float16Array?: unknown }).Float16Array;
  // The stand-in: an array-like class holding numbers (what Float32Array.from reads).
  class StandIn {
    [index: number]: number;
    readonly length: number;
    constructor(values: number[]) {
      this.length = values.length;
      values.forEach((v, i) => {
        this[i] = v;
      });
    }
  }
  if (!native) (globalThis as { Float16Array?: unknown }).Float16Array = StandIn;
  try {
    vi.resetModules();
    const { requireTensorArray } = await import('../src/plan/checks.ts');
    const F16 = (globalThis as unknown as { Float16Array: new (values: number[]) => ArrayLike<number> }).Float16Array;
    const x = halfInput(12, 7);
    const array = new F16(Array.from(x.values));
    const widened = requireTensorArray('test', 'query', array, 12, '[12]');
    expect(widened).toBeInstanceOf(Float32Array);
    expect(Array.from(widened)).toEqual(Array.from(x.values));
  } finally {
    if (!native) delete (globalThis as { Float16Array?: unknown }).Float16Array;
    vi.resetModules();
  }
});

describe('refused before any GPU work, with typed errors', () => {
  const expectRejected = async (promise: Promise<unknown>, kind: new (...args: never[]) => Error, ...fragments: string[]) => {
    const error = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error, 'expected a rejection').toBeInstanceOf(kind);
    for (const f of fragments) expect((error as Error).message).toContain(f);
  };

  test('arrays that are not float32 or half; half arrays of the wrong length; bad outputType', async () => {
    const engine = engines.gpu;
    const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
    try {
      const options = { batchSize: B, seqLen: S };
      await expectRejected(mha.forward(new Int16Array(B * S * E) as never, options), InvalidArgumentError, 'query', 'Uint16Array of IEEE binary16 bits', 'Int16Array');
      await expectRejected(mha.forward(new Uint16Array(B * S * E - 1), options), ShapeMismatchError, 'query.length', String(B * S * E));
      await expectRejected(mha.forward(new Uint16Array(B * S * E), { ...options, outputType: 'f64' as never }), InvalidArgumentError, 'options.outputType', "'f16'");
      const buffer = engine.device!.createBuffer({ size: B * S * E * 4, usage: Usage.STORAGE });
      try {
        await expectRejected(mha.forward(buffer, { ...options, returnBuffer: true, outputType: 'f16' } as never), UnsupportedError, 'options.outputType', 'returnBuffer');
      } finally {
        buffer.destroy();
      }
      const packed = new Uint16Array(S * E);
      const cu = Int32Array.from([0, 3, S]);
      const varlen = await mha.forward(packed, { cuSeqlens: cu, outputType: 'f16' });
      expect(varlen.output).toBeInstanceOf(Uint16Array);
      await expectRejected(mha.forward(new Uint16Array(S * E + 1), { cuSeqlens: cu }), ShapeMismatchError, 'cuSeqlens');
    } finally {
      mha.dispose();
    }
    const q = new Uint16Array(B * 2 * S * Dh);
    await expectRejected(engine.scaledDotProductAttention(q, q, new Uint16Array(3), { batchSize: B, numHeads: 2, seqLen: S, headDim: Dh }), ShapeMismatchError, 'value');
  });
});
