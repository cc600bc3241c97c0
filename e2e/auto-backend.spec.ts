// createAttentionEngine() in Chromium with no backend asked for: the adapter is SwiftShader here (a
// CPU running the shaders), so the engine holds WebGPU and 'wasm', answers on 'wasm' first, measures
// WebGPU in the background and reports the choice (src/auto/). Its outputs match the float64
// reference whichever backend ran. The Node side, with fake timers: test/auto-backend.test.ts.

import { expect, test } from '@playwright/test';
import { expectOutputClose } from './helpers.ts';

test('the default engine on a software adapter answers on wasm, measures WebGPU, and stays correct', async ({ page }, testInfo) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto('/e2e/harness.html');
  const r = await page.evaluate(async () => {
    const lib = '/src/index.ts';
    const util = '/test/helpers/random.ts';
    const { createAttentionEngine } = await import(/* @vite-ignore */ lib);
    const { mulberry32, randomStateDict, uniform } = await import(/* @vite-ignore */ util);
    const config = { embedDim: 64, numHeads: 4 };
    const weights = randomStateDict(config, 7);
    const x = uniform(2 * 37 * 64, 1, mulberry32(3));
    const options = { batchSize: 2, seqLen: 37, isCausal: true };
    const engine = await createAttentionEngine();
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    const mha = engine.createMultiHeadAttention(config, weights);
    const first = await mha.forward(x, options);
    const firstBackend = engine.backend;
    const pendingAfterFirst = engine.tuning?.backends?.pending;
    await engine.settled();
    const second = await mha.forward(x, options);
    const report = engine.tuning?.backends;
    const ref = await cpu.createMultiHeadAttention(config, weights).forward(x, options);
    const out = {
      adapter: engine.adapterInfo,
      fallbackReason: engine.fallbackReason,
      firstBackend,
      secondBackend: engine.backend,
      pendingAfterFirst,
      report,
      first: Array.from(first.output as Float32Array),
      second: Array.from(second.output as Float32Array),
      ref: Array.from(ref.output as Float32Array),
    };
    engine.dispose();
    cpu.dispose();
    return out;
  });
  expect(errors).toEqual([]);
  expect(r.adapter?.architecture ?? '').toMatch(/swiftshader/i);
  expect(r.fallbackReason).toBeNull();
  expect(r.firstBackend).toBe('wasm');
  expect(r.pendingAfterFirst).toBe(1);
  expect(r.report?.why).toMatch(/runs its shaders on the CPU/);
  expect(r.report?.pending).toBe(0);
  expect(r.report?.choices).toHaveLength(1);
  const [choice] = r.report!.choices;
  expect(Object.keys(choice.timesMs ?? {}).sort()).toEqual(['wasm', 'webgpu']);
  expect(r.secondBackend).toBe(choice.backend);
  const shape = { batchSize: 2, seqLen: 37, embedDim: 64 };
  expectOutputClose(r.first, r.ref, shape, ['wasm (first call)', 'CPU reference'], testInfo);
  expectOutputClose(r.second, r.ref, shape, [`${r.secondBackend} (after the choice)`, 'CPU reference'], testInfo);
});
