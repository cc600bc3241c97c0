// Bad input: every check happens on the host, before any GPU work, and its error names the argument,
// what was expected and what was given. The same checks run on both backends.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import {
  createAttentionEngine,
  DeviceLimitError,
  DisposedError,
  InvalidArgumentError,
  MissingWeightError,
  ShapeMismatchError,
  UnsupportedError,
  WebGPUUnavailableError,
} from '../src/index.ts';
import { randomStateDict } from './helpers/random.ts';
import { WasmBackend } from '../src/wasm/backend.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const config = { embedDim: 8, numHeads: 2 };
const stateDict = randomStateDict(config, 7);
const query = new Float32Array(2 * 3 * 8); // [B=2, S=3, E=8]

const engines = useEngines();

type ErrorClass = new (...args: never[]) => Error;

/** Expects `fn` to throw `kind` with every fragment in its message. */
function expectError(fn: () => unknown, kind: ErrorClass, ...fragments: string[]): void {
  let error: unknown;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  expect(error, 'expected an error').toBeInstanceOf(kind);
  for (const f of fragments) expect((error as Error).message).toContain(f);
}

async function expectRejection(promise: Promise<unknown>, kind: ErrorClass, ...fragments: string[]): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e) => e,
  );
  expect(error, 'expected a rejection').toBeInstanceOf(kind);
  for (const f of fragments) expect((error as Error).message).toContain(f);
}

describe.each(['webgpu', 'cpu'] as const)('layer configuration (%s)', (backend) => {
  const engine = () => engines.of(backend);

  test('embedDim not divisible by numHeads', () => {
    expectError(
      () => engine().createMultiHeadAttention({ embedDim: 10, numHeads: 3 }, stateDict),
      InvalidArgumentError,
      'config.embedDim',
      'divisible by numHeads (3)',
      'got 10',
    );
  });

  test.each([0, -4, 2.5, Number.NaN, '8', undefined])('embedDim = %s is not a positive integer', (bad) => {
    expectError(
      () => engine().createMultiHeadAttention({ embedDim: bad as number, numHeads: 2 }, stateDict),
      InvalidArgumentError,
      'config.embedDim',
      'a positive integer',
      'got',
    );
  });

  test('numHeads = 0', () => {
    expectError(() => engine().createMultiHeadAttention({ embedDim: 8, numHeads: 0 }, stateDict), InvalidArgumentError, 'config.numHeads', 'got 0');
  });

  test('numKvHeads not dividing numHeads', () => {
    expectError(
      () => engine().createMultiHeadAttention({ embedDim: 12, numHeads: 3, numKvHeads: 2 }, stateDict),
      InvalidArgumentError,
      'config.numKvHeads',
      'a divisor of numHeads (3)',
      'got 2',
    );
  });

  test('a misspelt config option', () => {
    expectError(
      () => engine().createMultiHeadAttention({ embedDim: 8, num_heads: 2 } as never, stateDict),
      InvalidArgumentError,
      'config.num_heads',
      'unknown option',
      'numHeads',
    );
  });

  test('dropout is refused: inference only', () => {
    expectError(() => engine().createMultiHeadAttention({ ...config, dropout: 0.1 }, stateDict), UnsupportedError, 'config.dropout', 'got 0.1', 'inference only');
  });

  test('a missing state_dict entry', () => {
    const { in_proj_bias: _, ...rest } = stateDict;
    expectError(() => engine().createMultiHeadAttention(config, rest), MissingWeightError, 'stateDict["in_proj_bias"]', 'a Float32Array [24] = 24', 'got nothing');
  });

  test('a wrongly sized state_dict entry', () => {
    expectError(
      () => engine().createMultiHeadAttention(config, { ...stateDict, 'out_proj.weight': new Float32Array(63) }),
      ShapeMismatchError,
      'stateDict["out_proj.weight"]',
      '[8, 8] = 64',
      'got length 63',
    );
  });

  test('a state_dict entry that is not a Float32Array', () => {
    expectError(
      () => engine().createMultiHeadAttention(config, { ...stateDict, in_proj_weight: new Float64Array(192) as never }),
      InvalidArgumentError,
      'stateDict["in_proj_weight"]',
      'a Float32Array [24, 8] = 192',
      'got Float64Array of length 192',
      'Float32Array.from',
    );
  });

  test('an unexpected state_dict name', () => {
    const { 'out_proj.weight': w, ...rest } = stateDict;
    expectError(
      () => engine().createMultiHeadAttention(config, { ...rest, out_proj_weight: w }),
      InvalidArgumentError,
      'stateDict["out_proj_weight"]',
      'out_proj.weight',
    );
  });

  test('biases given to a layer with bias: false', () => {
    expectError(() => engine().createMultiHeadAttention({ ...config, bias: false }, stateDict), InvalidArgumentError, 'stateDict["in_proj_bias"]', 'bias: false');
  });

  test('the sizes are checked before the weights', () => {
    expectError(() => engine().createMultiHeadAttention({ embedDim: 10, numHeads: 3 }, {}), InvalidArgumentError, 'config.embedDim');
  });
});

describe.each(['webgpu', 'cpu'] as const)('forward arguments (%s)', (backend) => {
  const engine = () => engines.of(backend);

  async function rejects(q: unknown, options: unknown, kind: ErrorClass, ...fragments: string[]) {
    const mha = engine().createMultiHeadAttention(config, stateDict);
    const before = engine().stats();
    const run = () => expectRejection(mha.forward(q as Float32Array, options as never), kind, ...fragments);
    // On WebGPU: nothing reaches the device (no error, no new buffer).
    if (backend === 'webgpu') await withErrorScopes(engines.gpu.device!, run);
    else await run();
    expect(engine().stats()).toEqual(before);
    mha.dispose();
  }

  test('a query whose length is not B·S·E', () =>
    rejects(new Float32Array(47), { batchSize: 2, seqLen: 3 }, ShapeMismatchError, 'query.length', 'batchSize·seqLen·embedDim = 2·3·8 = 48', 'got 47'));

  test('a query that is not a Float32Array', () =>
    rejects(Array.from(query), { batchSize: 2, seqLen: 3 }, InvalidArgumentError, 'query', 'Float32Array', 'an Array of length 48'));

  test.each([
    ['batchSize', 0],
    ['seqLen', 1.5],
    ['seqLen', undefined],
  ] as const)('options.%s = %s', (name, value) =>
    rejects(query, { batchSize: 2, seqLen: 3, [name]: value }, InvalidArgumentError, `options.${name}`, 'a positive integer'),
  );

  test('isCausal must be a boolean', () => rejects(query, { batchSize: 2, seqLen: 3, isCausal: 1 }, InvalidArgumentError, 'options.isCausal', 'true or false', 'got 1'));

  test('a misspelt option is not ignored', () =>
    rejects(query, { batchSize: 2, seqLen: 3, is_causal: true }, InvalidArgumentError, 'options.is_causal', 'Did you mean "isCausal"?'));

  test('dropout is refused', () => rejects(query, { batchSize: 2, seqLen: 3, dropout: 0.5 }, UnsupportedError, 'options.dropout', 'inference only'));

  test('dropout: 0 is no dropout, and accepted', async () => {
    const mha = engine().createMultiHeadAttention({ ...config, dropout: 0 }, stateDict);
    const { output } = await mha.forward(query, { batchSize: 2, seqLen: 3, dropout: 0 });
    expect(output.length).toBe(48);
    mha.dispose();
  });

  test('options missing altogether', () => rejects(query, undefined, InvalidArgumentError, 'options', 'an object', 'got undefined'));
});

describe.each(['webgpu', 'cpu'] as const)('use after dispose (%s)', (backend) => {
  test('a disposed layer', async () => {
    const engine = backend === 'webgpu' ? await createGpuEngine() : await createAttentionEngine({ backend: 'cpu' });
    const mha = engine.createMultiHeadAttention(config, stateDict);
    mha.dispose();
    mha.dispose(); // twice is harmless
    await expectRejection(mha.forward(query, { batchSize: 2, seqLen: 3 }), DisposedError, 'MultiHeadAttention.forward', 'after dispose()');
    engine.dispose();
  });

  test('a layer of a disposed engine, and the engine itself', async () => {
    const engine = backend === 'webgpu' ? await createGpuEngine() : await createAttentionEngine({ backend: 'cpu' });
    const mha = engine.createMultiHeadAttention(config, stateDict);
    engine.dispose();
    await expectRejection(mha.forward(query, { batchSize: 2, seqLen: 3 }), DisposedError, 'after dispose()');
    expectError(() => engine.createMultiHeadAttention(config, stateDict), DisposedError, 'AttentionEngine.createMultiHeadAttention');
    expectError(() => engine.stats(), DisposedError);
  });
});

describe('engine options', () => {
  test('an unknown backend', async () => {
    await expectRejection(createAttentionEngine({ backend: 'webgl' as never }), InvalidArgumentError, 'options.backend', '"webgpu", "cpu"', 'got "webgl"');
  });

  test('head sizes over 256 are refused on WebGPU, with the fix; the CPU backend takes them; odd sizes run on both', async () => {
    const big = { embedDim: 512, numHeads: 1 }; // Dh = 512
    expectError(() => engines.gpu.createMultiHeadAttention(big, randomStateDict(big, 1)), UnsupportedError, 'at most 256', 'got 512 / 1 = 512', "backend: 'cpu'");
    const mha = engines.cpu.createMultiHeadAttention(big, randomStateDict(big, 1));
    expect((await mha.forward(new Float32Array(512), { batchSize: 1, seqLen: 1 })).output.length).toBe(512);
    const odd = { embedDim: 6, numHeads: 1 }; // Dh = 6, not a multiple of 4: padded inside the engine (test/head-sizes.test.ts checks the values)
    const gpu = engines.gpu.createMultiHeadAttention(odd, randomStateDict(odd, 1));
    expect((await gpu.forward(new Float32Array(6), { batchSize: 1, seqLen: 1 })).output.length).toBe(6);
    gpu.dispose();
  });

  describe('where no adapter exists (a browser whose navigator.gpu finds none)', () => {
    const g = globalThis as { navigator?: unknown };
    let saved: PropertyDescriptor | undefined;
    beforeAll(() => {
      saved = Object.getOwnPropertyDescriptor(g, 'navigator');
      Object.defineProperty(g, 'navigator', { value: { gpu: { requestAdapter: async () => null } }, configurable: true, writable: true });
    });
    afterAll(() => {
      if (saved) Object.defineProperty(g, 'navigator', saved);
      else delete g.navigator;
    });

    test("backend: 'webgpu' fails with WebGPUUnavailableError", async () => {
      await expectRejection(createAttentionEngine({ backend: 'webgpu' }), WebGPUUnavailableError, 'requestAdapter() returned null');
    });

    test("no backend asked for: the 'wasm' backend, and it says why", async () => {
      const engine = await createAttentionEngine();
      expect(engine.backend).toBe('wasm');
      expect(engine.device).toBeNull();
      expect(engine.fallbackReason).toContain('requestAdapter() returned null');
      expect(engine.fallbackReason).toContain("So the 'wasm' backend runs (float32, WebAssembly SIMD).");
      engine.dispose();
    });

    test('without WebAssembly SIMD either: the float64 reference, and it says why', async () => {
      const create = vi.spyOn(WasmBackend, 'create').mockRejectedValueOnce(new WebAssembly.CompileError('SIMD unsupported'));
      try {
        const engine = await createAttentionEngine();
        expect(engine.backend).toBe('cpu');
        expect(engine.fallbackReason).toContain('requestAdapter() returned null');
        expect(engine.fallbackReason).toContain("The 'wasm' backend could not start either (SIMD unsupported): the float64 CPU reference runs.");
        engine.dispose();
      } finally {
        create.mockRestore();
      }
    });
  });
});

describe('device limits', () => {
  test('attention weights larger than maxStorageBufferBindingSize are refused before any GPU work', async () => {
    const l = { embedDim: 8, numHeads: 2 };
    const mha = engines.gpu.createMultiHeadAttention(l, randomStateDict(l, 1));
    const max = engines.gpu.device!.limits.maxStorageBufferBindingSize;
    const S = Math.ceil(Math.sqrt(max / (2 * 4))) + 1; // B·H·S²·4 bytes just over the limit
    const before = engines.gpu.stats();
    await withErrorScopes(engines.gpu.device!, () =>
      expectRejection(
        mha.forward(new Float32Array(S * 8), { batchSize: 1, seqLen: S, needWeights: true }),
        DeviceLimitError,
        'the attention weights [B, H, Sq, Skv] (needWeights)',
        `at most maxStorageBufferBindingSize = ${max} bytes`,
      ),
    );
    expect(engines.gpu.stats()).toEqual(before);
    mha.dispose();
  });
});

describe.each(['webgpu', 'cpu'] as const)('attention option arguments (%s)', (backend) => {
  const engine = () => engines.of(backend);
  const forward = (q: Float32Array, options: Record<string, unknown>) => {
    const mha = engine().createMultiHeadAttention(config, stateDict);
    return mha.forward(q, options as never).finally(() => mha.dispose());
  };
  const q6 = new Float32Array(2 * 3 * 8); // [B=2, S=3, E=8]

  test('attnMask of the wrong shape', () =>
    expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, attnMask: new Float32Array(10) }),
      ShapeMismatchError,
      'options.attnMask',
      '[Sq, Skv] = [3, 3] = 9 or [B·H, Sq, Skv] = [4, 3, 3] = 36',
      'got length 10',
    ));

  test('attnMask of the wrong type', () =>
    expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, attnMask: new Int32Array(9) }),
      InvalidArgumentError,
      'options.attnMask',
      'Float32Array',
      'Uint8Array',
      'got Int32Array of length 9',
    ));

  test('keyPaddingMask of the wrong shape or type', async () => {
    await expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, keyPaddingMask: new Uint8Array(3) }),
      ShapeMismatchError,
      'options.keyPaddingMask',
      '[B, Skv] = [2, 3] = 6',
      'got length 3',
    );
    await expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, keyPaddingMask: new Float32Array(6) }),
      InvalidArgumentError,
      'options.keyPaddingMask',
      'a Uint8Array',
      '1 = masked out',
    );
  });

  test('headMask of the wrong shape', () =>
    expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, headMask: new Float32Array(3) }),
      ShapeMismatchError,
      'options.headMask',
      '[H] = 2 or [B, H] = [2, 2] = 4',
      'got length 3',
    ));

  test.each([0, -1, 1.5, '4'])('window = %s', (w) =>
    expectRejection(forward(q6, { batchSize: 2, seqLen: 3, window: w }), InvalidArgumentError, 'options.window', 'a positive integer'),
  );

  test('key without value, and value without key', async () => {
    await expectRejection(forward(q6, { batchSize: 2, seqLen: 3, key: q6 }), InvalidArgumentError, 'options.value', 'given with options.key');
    await expectRejection(forward(q6, { batchSize: 2, seqLen: 3, value: q6 }), InvalidArgumentError, 'options.key', 'given with options.value');
  });

  test('key of the wrong length for kvSeqLen', () =>
    expectRejection(
      forward(q6, { batchSize: 2, seqLen: 3, kvSeqLen: 5, key: q6, value: q6 }),
      ShapeMismatchError,
      'options.key',
      '[B, Skv, kdim] = [2, 5, 8] = 80',
      'got length 48',
    ));

  test('kvSeqLen ≠ seqLen without key and value', () =>
    expectRejection(forward(q6, { batchSize: 2, seqLen: 3, kvSeqLen: 4 }), InvalidArgumentError, 'options.kvSeqLen', 'equal to seqLen (3)'));

  test('cuSeqlens not starting at 0, not increasing, not ending at the total', async () => {
    const q = new Float32Array(6 * 8); // T = 6
    await expectRejection(forward(q, { cuSeqlens: Int32Array.from([1, 6]) }), InvalidArgumentError, 'options.cuSeqlens[0]', 'got 1');
    await expectRejection(
      forward(q, { cuSeqlens: Int32Array.from([0, 4, 4, 6]) }),
      InvalidArgumentError,
      'options.cuSeqlens[2]',
      'greater than cuSeqlens[1] (4)',
      'got 4',
    );
    await expectRejection(
      forward(q, { cuSeqlens: Int32Array.from([0, 2, 5]) }),
      ShapeMismatchError,
      'options.cuSeqlens',
      'to end at T = query.length / embedDim = 6',
      'got 5',
    );
    await expectRejection(forward(q, { cuSeqlens: [0, 6] }), InvalidArgumentError, 'options.cuSeqlens', 'an Int32Array');
  });

  test('cuSeqlens refuses batchSize, masks over keys and needWeights', async () => {
    const q = new Float32Array(6 * 8);
    const cu = Int32Array.from([0, 2, 6]);
    await expectRejection(forward(q, { cuSeqlens: cu, batchSize: 2 }), UnsupportedError, 'options.batchSize', 'left out with cuSeqlens');
    await expectRejection(forward(q, { cuSeqlens: cu, needWeights: true }), UnsupportedError, 'options.needWeights', 'run a sequence alone');
    await expectRejection(forward(q, { cuSeqlens: cu, keyPaddingMask: new Uint8Array(6) }), UnsupportedError, 'options.keyPaddingMask');
  });

  test('scaledDotProductAttention: wrong lengths and GQA that does not divide', async () => {
    const q = new Float32Array(1 * 4 * 3 * 8);
    const kv = new Float32Array(1 * 2 * 3 * 8);
    const opts = { batchSize: 1, numHeads: 4, numKvHeads: 2, seqLen: 3, headDim: 8 };
    await expectRejection(
      engine().scaledDotProductAttention(q, new Float32Array(5), kv, opts),
      ShapeMismatchError,
      'scaledDotProductAttention',
      'key',
      '[B, G, Skv, Dh] = [1, 2, 3, 8] = 48',
      'got length 5',
    );
    await expectRejection(
      engine().scaledDotProductAttention(q, kv, kv, { ...opts, numKvHeads: 3 }),
      InvalidArgumentError,
      'options.numKvHeads',
      'a divisor of numHeads (4)',
      'got 3',
    );
  });
});
