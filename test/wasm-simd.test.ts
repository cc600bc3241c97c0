// createAttentionEngine's options.wasmSimd and engine.wasmSimd (src/wasm/kernels.ts WasmSimd): which build
// of the 'wasm' kernels runs. 'auto' (the default) takes 'relaxed' where the platform runs relaxed SIMD
// right (here: Node 20 with --experimental-wasm-relaxed-simd, vite.config.ts), else 'simd128'. Their
// projections give the same bits; the relaxed build's float multiply-adds are fused (src/wasm/kernels.ts
// WasmSimd). Layers of 4-bit weights with activations 'q8' (the products the relaxed build speeds up:
// wasm/q8.ts Q8.rdot) and 'f32' are run through a prefill and decode steps on both builds, on 1 and 2
// threads; then the bad inputs, and a platform without relaxed SIMD, or with a wrong one (its probe refused).

import { afterEach, describe, expect, test, vi } from 'vitest';
import { createAttentionEngine, InvalidArgumentError, type MultiHeadAttentionConfig, quantizeWeights, UnsupportedError } from '../src/index.ts';
import { expectClose } from '../src/util/tolerance.ts';
import { relaxedSimdSupported, resolveWasmSimd } from '../src/wasm/kernels.ts';
import { prefillThenDecode } from '../e2e/decode-steps.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

afterEach(() => {
  vi.restoreAllMocks();
});

describe('engine.wasmSimd', () => {
  test("the default is 'relaxed' where the platform runs it; 'simd128' asked for is obeyed; non-wasm engines say null", async () => {
    expect(relaxedSimdSupported(), "relaxed SIMD must run here (vite.config.ts's execArgv turns it on in Node 20)").toBe(true);
    const auto = await createAttentionEngine({ backend: 'wasm', threads: 1 });
    const asked = await createAttentionEngine({ backend: 'wasm', threads: 1, wasmSimd: 'relaxed' });
    const plain = await createAttentionEngine({ backend: 'wasm', threads: 1, wasmSimd: 'simd128' });
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    try {
      expect([auto.wasmSimd, asked.wasmSimd, plain.wasmSimd, cpu.wasmSimd]).toEqual(['relaxed', 'relaxed', 'simd128', null]);
    } finally {
      for (const e of [auto, asked, plain, cpu]) e.dispose();
    }
  });

  test.each([
    ['q4_0', 'q8', 1],
    ['q4_0', 'q8', 2],
    ['q4_k', 'q8', 1],
    ['q4_0', 'f32', 1],
  ] as const)(
    "a %s layer with activations '%s', prefill 37 then 3 decode steps, %i thread(s): 'relaxed' within float32's error of 'simd128'",
    async (format, activations, threads) => {
      // The projections give the same bits (Q8.rdot is exact: wasm-q8.test.ts checks the kernels bit
      // for bit); the attention's and the float GEMM's multiply-adds are fused in the relaxed build (F.madd),
      // so the layers agree to float32's error, and with 'q8' an attention output element on a rounding
      // boundary of W_O's input may round the other way (one step of its block: test/activations-q8.test.ts
      // bounds that against the float64 reference, for the default build, which here is the relaxed one).
      const config: MultiHeadAttentionConfig = { embedDim: 256, numHeads: 8, numKvHeads: 2, activations };
      const sd = quantizeWeights(randomStateDict({ embedDim: 256, numHeads: 8, numKvHeads: 2 }, 4), { dtype: format });
      const [B, S, E] = [2, 40, 256];
      const x = uniform(B * S * E, 1, mulberry32(9));
      const outs: Float32Array[] = [];
      for (const wasmSimd of ['relaxed', 'simd128'] as const) {
        const engine = await createAttentionEngine({ backend: 'wasm', threads, wasmSimd });
        try {
          expect(engine.threads).toBe(threads);
          expect(engine.wasmSimd).toBe(wasmSimd);
          const layer = engine.createMultiHeadAttention(config, sd);
          outs.push(await prefillThenDecode(layer, x, B, S, E, 3, true));
          layer.dispose();
        } finally {
          engine.dispose();
        }
      }
      expect(outs[0].every(Number.isFinite)).toBe(true);
      expectClose(outs[0], Float64Array.from(outs[1]), activations === 'f32' ? { atol: 1e-6, rtol: 1e-5 } : { atol: 2e-4, rtol: 2e-3 }, `${format} ${activations}`);
    },
  );
});

describe('bad input', () => {
  test('a wasmSimd other than auto, relaxed or simd128: InvalidArgumentError naming options.wasmSimd', async () => {
    await expect(createAttentionEngine({ backend: 'wasm', wasmSimd: 'sse' as 'auto' })).rejects.toThrow(InvalidArgumentError);
    await expect(createAttentionEngine({ backend: 'wasm', wasmSimd: 'sse' as 'auto' })).rejects.toThrow(
      /options\.wasmSimd.*"auto", "relaxed", "simd128" or left out.*'sse'|options\.wasmSimd.*"sse"/s,
    );
  });

  test("wasmSimd without backend 'wasm': InvalidArgumentError saying to pass backend 'wasm'", async () => {
    for (const backend of ['cpu', undefined] as const) {
      const made = createAttentionEngine({ backend, wasmSimd: 'simd128' });
      await expect(made).rejects.toThrow(InvalidArgumentError);
      await expect(made).rejects.toThrow(/options\.wasmSimd[\s\S]*backend: 'wasm'/);
    }
  });

  test("a platform without relaxed SIMD (its probe fails): 'relaxed' is refused (UnsupportedError), 'auto' runs 'simd128'", async () => {
    vi.spyOn(WebAssembly, 'validate').mockReturnValue(false);
    expect(relaxedSimdSupported()).toBe(false);
    expect([resolveWasmSimd('auto'), resolveWasmSimd('relaxed'), resolveWasmSimd('simd128')]).toEqual(['simd128', null, 'simd128']);
    const made = createAttentionEngine({ backend: 'wasm', wasmSimd: 'relaxed' });
    await expect(made).rejects.toThrow(UnsupportedError);
    await expect(made).rejects.toThrow(/options\.wasmSimd[\s\S]*Pass 'auto'/);
    const engine = await createAttentionEngine({ backend: 'wasm', threads: 1 });
    try {
      expect(engine.wasmSimd).toBe('simd128');
    } finally {
      engine.dispose();
    }
  });

  test.each([
    ['its i8 dot product wrong (Node 20 baseline compiler, flag on, for the add form)', (m: WebAssembly.Memory) => new Int16Array(m.buffer, 0, 8).fill(2)],
    ['a multiply-add that is neither fused nor x·y then + z', (m: WebAssembly.Memory) => new Float32Array(m.buffer, 16, 4).set([2 ** -11 + 2 ** -23], 0)],
    ['a multiply-add that drops the addend', (m: WebAssembly.Memory) => new Float32Array(m.buffer, 16, 4).set([6], 1)],
  ])('a platform that validates relaxed SIMD but computes %s is taken as without it', (_, spoil) => {
    const instance = WebAssembly.Instance;
    vi.spyOn(WebAssembly, 'Instance').mockImplementation(function (this: unknown, module: WebAssembly.Module, imports?: WebAssembly.Imports) {
      const real = new instance(module, imports);
      const { m, f } = real.exports as { m: WebAssembly.Memory; f: () => void };
      const wrong = () => {
        f();
        spoil(m);
      };
      return { exports: { m, f: wrong } };
    } as unknown as typeof WebAssembly.Instance);
    expect(relaxedSimdSupported()).toBe(false);
    expect(resolveWasmSimd('relaxed')).toBe(null);
  });
});
