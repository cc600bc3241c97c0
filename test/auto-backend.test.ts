// The automatic backend choice (src/auto/): with no backend asked for on a software adapter (lavapipe
// here), an engine answers on 'wasm' and measures WebGPU in the background per shape class,
// switching only when WebGPU is clearly faster. The decision is tested with fake timers (the
// trials run for real, their times are made up), so the tests do not depend on this machine's speed.

import { afterAll, describe, expect, test } from 'vitest';
import { AutoBackend } from '../src/auto/backend.ts';
import type { Timer } from '../src/auto/chooser.ts';
import { AttentionEngine, createAttentionEngine } from '../src/engine.ts';
import type { MultiHeadAttentionConfig, StateDict } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { WasmBackend } from '../src/wasm/backend.ts';
import { WebGPUBackend } from '../src/webgpu/backend.ts';
import { acquireDevice } from '../src/webgpu/device.ts';

const config: MultiHeadAttentionConfig = { embedDim: 32, numHeads: 4 };
const weights: StateDict = randomStateDict(config, 5);
const B = 2;
const S = 13;
const x = uniform(B * S * 32, 1, mulberry32(9));
const tol = f32Tolerance([32, S, 32]);

const cpu = await createAttentionEngine({ backend: 'cpu' });
const cpuLayer = cpu.createMultiHeadAttention(config, weights);
const reference = (await cpuLayer.forward(x, { batchSize: B, seqLen: S, isCausal: true })).output;
const engines: AttentionEngine[] = [cpu];
afterAll(() => {
  for (const e of engines) e.dispose();
});

/** Fake times: each backend's trials take these milliseconds (after running for real). */
function fixedTimes(times: { wasm: number[]; webgpu: number[] }): Timer {
  const next = { wasm: 0, webgpu: 0 };
  return async (backend, run) => {
    await run();
    const list = times[backend];
    return list[next[backend]++ % list.length];
  };
}

/** An engine as createAttentionEngine() makes on a software adapter, with a fake timer. */
async function autoEngine(timer: Timer, background: boolean | null = null): Promise<AttentionEngine> {
  const { device, adapterInfo } = await acquireDevice();
  const gpu = new WebGPUBackend({ device, ownsDevice: true, adapterInfo, tuning: { mode: 'off', forced: {}, store: null, background } });
  const engine = new AttentionEngine(new AutoBackend(gpu, await WasmBackend.create({ threads: 1 }), 'a test', timer), null);
  engines.push(engine);
  return engine;
}

describe('createAttentionEngine() on a software adapter', () => {
  test("answers on 'wasm' first, measures WebGPU in the background, and reports both", async () => {
    const engine = await createAttentionEngine();
    engines.push(engine);
    expect(engine.fallbackReason).toBeNull();
    expect(engine.device).not.toBeNull();
    expect(engine.adapterInfo?.vendor).toBeTruthy();
    expect(engine.tuning?.backends?.why).toMatch(/no backend was asked for and the adapter .* runs its shaders on the CPU/);
    const mha = engine.createMultiHeadAttention(config, weights);
    const { output } = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('wasm');
    expectClose(output, reference, tol);
    expect(engine.tuning?.backends?.pending).toBe(1);
    await engine.settled();
    const report = engine.tuning!.backends!;
    expect(report.pending).toBe(0);
    expect(report.failures).toEqual([]);
    expect(report.choices).toHaveLength(1);
    const [choice] = report.choices;
    expect(choice.shapeClass).toBe('layer E32 H4 G4 Dh8 kdim32 vdim32 · B2 Sq16 Skv16 causal');
    expect(Object.keys(choice.timesMs!).sort()).toEqual(['wasm', 'webgpu']);
    const again = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe(choice.backend);
    expectClose(again.output, reference, tol);
  });

  test.each([
    ['an option only WebGPU honours', { tuning: { mode: 'off' } }],
    ["backend: 'webgpu'", { backend: 'webgpu' }],
  ] as const)('%s: WebGPU alone, no choice', async (_, options) => {
    const engine = await createAttentionEngine(options);
    engines.push(engine);
    expect(engine.backend).toBe('webgpu');
    expect(engine.tuning?.backends).toBeUndefined();
  });
});

describe('the decision (fake timers)', () => {
  test('WebGPU clearly faster in every round: the class switches to WebGPU, others stay on wasm', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }));
    const mha = engine.createMultiHeadAttention(config, weights);
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('wasm');
    await engine.settled();
    const [choice] = engine.tuning!.backends!.choices;
    expect(choice).toMatchObject({ backend: 'webgpu', timesMs: { wasm: 10, webgpu: 5 }, steady: true });
    expect(choice.reason).toBe("webgpu is 50% faster than 'wasm', which answered first, in 5 of 5 rounds");
    const { output } = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('webgpu');
    expectClose(output, reference, tol);
    // Another shape class starts on 'wasm' again.
    await mha.forward(x.subarray(0, 3 * 32), { batchSize: 1, seqLen: 3 });
    expect(engine.backend).toBe('wasm');
  });

  test.each([
    ['faster by less than the margin', { wasm: [10], webgpu: [9.5] }, /faster by 5% only .*kept 'wasm'|kept/],
    ['as fast', { wasm: [10], webgpu: [10] }, /'wasm' is the fastest|kept/],
    ['faster in too few rounds', { wasm: [10, 10, 10, 10, 10], webgpu: [8.5, 8.6, 8.7, 11, 11] }, /won 3 of 5 rounds only/],
    ['spread over the limit', { wasm: [10, 10, 10, 10, 10], webgpu: [2, 6, 6, 6, 6] }, /too noisy to decide/],
  ])("WebGPU %s: 'wasm' stays", async (_, times, reason) => {
    const engine = await autoEngine(fixedTimes(times));
    const mha = engine.createMultiHeadAttention(config, weights);
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    await engine.settled();
    const [choice] = engine.tuning!.backends!.choices;
    expect(choice.backend).toBe('wasm');
    expect(choice.reason).toMatch(reason);
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('wasm');
  });

  test('engine.tune() measures now', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }));
    const mha = engine.createMultiHeadAttention(config, weights);
    const report = await engine.tune([{ layer: mha, batchSize: B, seqLen: S, isCausal: true }]);
    expect(report?.backends?.pending).toBe(0);
    expect(report?.backends?.choices.map((c) => c.backend)).toEqual(['webgpu']);
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('webgpu');
  });

  test('with no background work (wgpu, or tuning.background false) calls stay on wasm until engine.tune() measures', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }), false);
    const mha = engine.createMultiHeadAttention(config, weights);
    const { output } = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expectClose(output, reference, tol);
    expect(engine.tuning!.backends!.pending).toBe(0); // nothing queued
    await engine.settled();
    expect(engine.tuning!.backends!.choices).toEqual([]);
    expect(engine.tuning!.backends!.why).toContain("calls stay on 'wasm' until engine.tune() measures");
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('wasm');
    await engine.tune([{ layer: mha, batchSize: B, seqLen: S, isCausal: true }]);
    await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('webgpu');
  });
});

describe('what runs where', () => {
  test('a KV cache moves to WebGPU with its calls, and decoding stays exact', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }));
    const mha = engine.createMultiHeadAttention(config, weights);
    const full = (await cpuLayer.forward(x.subarray(0, S * 32), { batchSize: 1, seqLen: S, isCausal: true })).output;
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    const ran: string[] = [];
    for (let t = 0; t < S; t++) {
      const { output } = await mha.forward(x.subarray(t * 32, (t + 1) * 32), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      ran.push(engine.backend);
      expectClose(output, full.subarray(t * 32, (t + 1) * 32), tol, `step ${t}`);
      await engine.settled(); // the step's class measured: the next step of that class runs on WebGPU
    }
    expect(ran).toContain('wasm');
    expect(ran).toContain('webgpu');
    const { key } = await cache.read();
    expect(key).toHaveLength(4 * S * 8);
    expect(key.every(Number.isFinite)).toBe(true);
  });

  test('GPU buffers run on WebGPU at once; scaledDotProductAttention on arrays is chosen too', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }));
    const device = engine.device!;
    const mha = engine.createMultiHeadAttention(config, weights);
    const buffer = device.createBuffer({ size: x.byteLength, usage: 0x80 | 0x8, mappedAtCreation: true }); // STORAGE | COPY_DST
    new Float32Array(buffer.getMappedRange()).set(x);
    buffer.unmap();
    const { output } = await mha.forward(buffer, { batchSize: B, seqLen: S, isCausal: true });
    expect(engine.backend).toBe('webgpu');
    expectClose(output, reference, tol);
    expect(engine.tuning!.backends!.pending).toBe(0); // nothing to measure: only WebGPU takes buffers
    buffer.destroy();

    const q = uniform(1 * 4 * 5 * 8, 1, mulberry32(3));
    const options = { batchSize: 1, numHeads: 4, seqLen: 5, headDim: 8 };
    const ref = await cpu.scaledDotProductAttention(q, q, q, options);
    const first = await engine.scaledDotProductAttention(q, q, q, options);
    expect(engine.backend).toBe('wasm');
    await engine.settled();
    const second = await engine.scaledDotProductAttention(q, q, q, options);
    expect(engine.backend).toBe('webgpu');
    for (const r of [first, second]) expectClose(r.output, ref.output, f32Tolerance([5, 8]));
  });

  test('a layer the wasm kernels do not cover (linear attention) is a WebGPU layer', async () => {
    const engine = await autoEngine(fixedTimes({ wasm: [10], webgpu: [5] }));
    const mha = engine.createMultiHeadAttention({ ...config, attention: 'linear' }, weights);
    await mha.forward(x, { batchSize: B, seqLen: S });
    expect(engine.backend).toBe('webgpu');
    expect(engine.tuning!.backends!.pending).toBe(0);
    expect(engine.tuning!.backends!.choices).toEqual([]);
  });
});
