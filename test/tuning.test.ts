// Kernel variant tuning: the background sweep a new shape class starts (gate, then interleaved
// timing), remembering (memory, a store, the default file in Node), the caller's overrides, and the
// errors of the `tuning` option. The Tuner is also driven directly with a fake gate and fake timings
// (a refused variant is never timed or chosen; only an adapter kind's candidates are compiled;
// concurrent sweeps are one), and measure.decide with made-up samples (a winner must win clearly and
// consistently; noise decides nothing). test/tiers.test.ts covers what a call runs meanwhile.

import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  type AttentionEngine,
  createAttentionEngine,
  fileTuningStore,
  InvalidArgumentError,
  referenceMultiHeadAttention,
  type TuningChoice,
  type TuningStore,
} from '../src/index.ts';
import { geometryOf, resolveForwardPlan, resolveLayerSpec, shapePlan } from '../src/plan/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { gateVariant } from '../src/webgpu/tuning/gate.ts';
import { decide, interleave, MARGIN, MAX_SPREAD } from '../src/webgpu/tuning/measure.ts';
import { BufferPool } from '../src/webgpu/buffers.ts';
import { attentionTrialPlan, TRIAL_ROWS, timeKernel } from '../src/webgpu/tuning/trial.ts';
import { type Gate, shapeClass, Tuner, type TuningAdapter, TUNING_VERSION } from '../src/webgpu/tuning/tuner.ts';
import {
  type AdapterKind,
  ATTENTION_VARIANTS,
  adapterKind,
  candidates,
  isSoftwareVariant,
  KERNEL_NAMES,
  type KernelName,
  needsSubgroups,
  PROJECTION_VARIANTS,
  VARIANTS,
} from '../src/webgpu/variants.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { createGpuEngine, watchDevice, withErrorScopes } from './helpers/gpu.ts';

const layer = { embedDim: 64, numHeads: 2 };
const sd = randomStateDict(layer, 3);
const [B, S] = [1, 70];
const x = uniform(B * S * layer.embedDim, 1, mulberry32(4));

/** A store in memory that counts its saves. */
function countingStore(): TuningStore & { saves: number; records: Record<string, TuningChoice> | null } {
  const store = {
    where: 'test store',
    saves: 0,
    records: null as Record<string, TuningChoice> | null,
    load: async () => store.records,
    save: async (r: Record<string, TuningChoice>) => {
      store.saves++;
      store.records = structuredClone(r);
    },
  };
  return store;
}

let owner: AttentionEngine;
beforeAll(async () => {
  owner = await createGpuEngine();
});
afterAll(() => owner?.dispose());

/** An engine on the shared device (pipelines compile once per device). */
async function engineWith(tuning: object): Promise<AttentionEngine> {
  const engine = await createAttentionEngine({ device: owner.device!, tuning });
  watchDevice(engine.device!);
  return engine;
}

async function forwardChecked(engine: AttentionEngine) {
  const mha = engine.createMultiHeadAttention(layer, sd);
  try {
    const { output } = await withErrorScopes(engine.device!, () => mha.forward(x, { batchSize: B, seqLen: S }));
    const ref = referenceMultiHeadAttention(layer, sd, x, { batchSize: B, seqLen: S });
    expectClose(output, ref.output, f32Tolerance([layer.embedDim, S, layer.embedDim]));
  } finally {
    mha.dispose();
  }
}

/** What a sweep's choice must satisfy: the built-in variant, or one that beat it clearly; its class is the call's. */
function expectSound(c: TuningChoice, plan: ReturnType<typeof resolveForwardPlan>) {
  expect(c.refused).toBeUndefined(); // every variant is correct on this adapter
  expect(c.shapeClass).toBe(shapeClass(c.kernel, plan, 'f32'));
  const builtIn = owner.tuning!.defaults[c.kernel];
  expect(Object.keys(c.timesMs!)).toContain(builtIn);
  if (c.variant !== builtIn) {
    expect(c.steady).toBe(true);
    expect(c.timesMs![c.variant]).toBeLessThanOrEqual((1 - MARGIN) * c.timesMs![builtIn]);
  }
}

describe('tuning on a real adapter', () => {
  const plan = resolveForwardPlan(resolveLayerSpec(layer), x, { batchSize: B, seqLen: S });

  test('the first forward waits for no sweep; settled() sweeps each kernel once, and steady choices are saved and reused', async () => {
    const store = countingStore();
    const engine = await engineWith({ store });
    expect(engine.tuning!.mode).toBe('auto');
    // Dawn compiles apart from its calls: compiles and sweeps run in the background.
    expect(engine.tuning!.background).toEqual({ enabled: true, why: 'compiles and sweeps run in the background, between calls' });
    expect(engine.tuning!.choices).toEqual([]);
    await forwardChecked(engine);
    expect(store.saves).toBe(0); // the call returned before any sweep finished
    await engine.settled();
    expect(engine.tuning!.pending).toBe(0);
    expect(engine.tuning!.failures).toEqual([]);
    const choices = engine.tuning!.choices;
    expect(choices.map((c) => c.kernel).sort()).toEqual([...KERNEL_NAMES].sort());
    for (const c of choices) {
      expect(c.source).toBe('sweep');
      expectSound(c, plan);
      // lavapipe has timestamp-query: trials are timed on the GPU's clock, which has no completion-timer floor.
      expect(c.clock).toBe('gpu-timestamps');
      expect(c.unusable).toBeUndefined();
    }
    // Dawn completes work at once: no nudging, and the report says how it was measured.
    expect(engine.tuning!.timing).toMatchObject({ clock: 'gpu-timestamps', timerDriven: false, nudged: false });
    expect(engine.tuning!.timing.completionMs).toBeLessThan(20);
    const steady = choices.filter((c) => c.steady !== false);
    const keys = Object.keys(store.records ?? {});
    expect(keys).toHaveLength(steady.length);
    for (const key of keys) expect(key.startsWith(`v${TUNING_VERSION}|`)).toBe(true);

    // The same shape class again: no new sweep, and the final kernels give the right output.
    const saves = store.saves;
    await forwardChecked(engine);
    await engine.settled();
    expect(store.saves).toBe(saves);
    engine.dispose();

    // A new engine with the same store reuses the steady choices without sweeping them.
    const again = await engineWith({ store });
    await forwardChecked(again);
    await again.settled();
    for (const c of steady) {
      const reused = again.tuning!.choices.find((r) => r.kernel === c.kernel)!;
      expect([reused.variant, reused.source]).toEqual([c.variant, 'store']);
    }
    again.dispose();
  });

  test('a file store keeps the choices between engines; the default store in Node is a file under XDG_CACHE_HOME', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tuning-')), 'sub', 'tuning.json');
    const engine = await engineWith({ store: fileTuningStore(path) });
    expect(engine.tuning!.store).toBe(path);
    await forwardChecked(engine);
    await engine.settled();
    // Steady choices are written to the file (a noisy sweep, under load, writes nothing).
    const steady = engine.tuning!.choices.filter((c) => c.steady !== false);
    const written = existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, TuningChoice>) : {};
    expect(
      Object.values(written)
        .map((c) => c.kernel)
        .sort(),
    ).toEqual(steady.map((c) => c.kernel).sort());
    engine.dispose();

    // A choice in the file is what a new engine runs for that class, without sweeping it.
    const info = owner.adapterInfo!;
    const adapter = [info.vendor, info.architecture, info.device, info.description].join('/');
    const flashClass = shapeClass('flash_attention', plan, 'f32');
    const remembered: TuningChoice = { kernel: 'flash_attention', shapeClass: flashClass, variant: 'rows32-keys32-r2', source: 'sweep', steady: true };
    await fileTuningStore(path).save({ ...written, [`v${TUNING_VERSION}|${adapter}|flash_attention|${flashClass}`]: remembered });
    const again = await engineWith({ store: fileTuningStore(path) });
    await forwardChecked(again);
    const flash = again.tuning!.choices.find((r) => r.kernel === 'flash_attention')!;
    expect([flash.variant, flash.source]).toEqual(['rows32-keys32-r2', 'store']);
    await again.settled();
    again.dispose();

    const plain = await createAttentionEngine({ device: owner.device! });
    expect(plain.tuning!.store).toBe(join(process.env.XDG_CACHE_HOME!, 'webgpu-attention', 'tuning.json'));
    plain.dispose();
  });

  test('a corrupt or outdated store is ignored and rewritten', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tuning-')), 'tuning.json');
    writeFileSync(path, '{ not json');
    const engine = await engineWith({ store: fileTuningStore(path) });
    await forwardChecked(engine);
    await engine.settled();
    expect(engine.tuning!.choices.every((c) => c.source === 'sweep')).toBe(true);
    engine.dispose();
    // The corrupt file is gone: what is there now is JSON (records of the steady choices, maybe none).
    const records = JSON.parse(readFileSync(path, 'utf8')) as Record<string, TuningChoice>;
    // Records of every kernel under an older version: a store written by another version is ignored.
    const info = owner.adapterInfo!;
    const adapter = [info.vendor, info.architecture, info.device, info.description].join('/');
    const old = Object.fromEntries(
      KERNEL_NAMES.map((kernel) => [
        `v0|${adapter}|${kernel}|${shapeClass(kernel, plan, 'f32')}`,
        { kernel, shapeClass: shapeClass(kernel, plan, 'f32'), variant: VARIANTS[kernel][0], source: 'sweep' },
      ]),
    );
    expect(typeof records).toBe('object');
    writeFileSync(path, JSON.stringify(old));
    const again = await engineWith({ store: fileTuningStore(path) });
    await forwardChecked(again);
    await again.settled();
    expect(again.tuning!.choices.every((c) => c.source === 'sweep')).toBe(true);
    again.dispose();
  });

  test('forced variants are used and never swept; mode off sweeps and compiles nothing in the background', async () => {
    const kernels = { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-r2' } as const;
    const forced = await engineWith({ kernels, store: null });
    await forwardChecked(forced);
    await forced.settled();
    expect(forced.tuning!.forced).toEqual(kernels);
    expect(forced.tuning!.store).toBe('memory');
    expect(forced.tuning!.choices.map((c) => c.kernel)).toEqual(['output_projection']);
    expect(forced.tuning!.compiled.map((c) => c.kernel)).not.toContain('flash_attention');
    forced.dispose();

    const off = await engineWith({ mode: 'off' });
    await forwardChecked(off);
    expect(off.tuning!.pending).toBe(0);
    await off.settled();
    expect(off.tuning!.choices).toEqual([]);
    expect(off.tuning!.compiled).toEqual([]);
    expect(Object.values(off.tuning!.defaults).every((v, i) => (VARIANTS[KERNEL_NAMES[i]] as readonly string[]).includes(v))).toBe(true);
    off.dispose();
  });

  test('scaledDotProductAttention tunes the attention kernel alone', async () => {
    const engine = await engineWith({ store: null });
    const [H, Dh, n] = [2, 16, 40];
    const q = uniform(H * n * Dh, 1, mulberry32(1));
    await withErrorScopes(engine.device!, () => engine.scaledDotProductAttention(q, q, q, { batchSize: 1, numHeads: H, seqLen: n, headDim: Dh }));
    await engine.settled();
    expect(engine.tuning!.choices.map((c) => c.kernel)).toEqual(['flash_attention']);
    engine.dispose();
  });

  test('the correctness gate passes every variant of every kernel on this adapter', async () => {
    const backend = (owner as unknown as { impl: { pool: Parameters<typeof gateVariant>[0] } }).impl;
    for (const kernel of KERNEL_NAMES) {
      for (const variant of VARIANTS[kernel]) {
        expect(await gateVariant(backend.pool, 'unrolling-cpu', kernel, variant, 20), `${kernel} ${variant}`).toBeNull();
      }
    }
  });

  test('a subgroup variant cannot be forced on a device without the subgroups feature', async () => {
    const { create } = (await import('webgpu')) as { create: (flags: string[]) => GPU };
    const gpu = create([]); // Dawn's GPU object must outlive its devices: kept to the end
    const device = await (await gpu.requestAdapter())!.requestDevice(); // no features requested
    expect(device.features.has('subgroups')).toBe(false);
    for (const kernels of [{ qkv_projection: 'subgroup-4x4' }, { flash_attention: 'rows16-keys32-sg' }] as const) {
      await expect(createAttentionEngine({ backend: 'webgpu', device, tuning: { kernels } })).rejects.toThrow(/needs the "subgroups" feature/);
    }
    device.destroy();
    // A real use of `gpu` after its device is gone (which also keeps it alive until here): it still hands out adapters.
    expect(await gpu.requestAdapter()).not.toBeNull();
  });

  test('the CPU backend has no tuning; settled, warmup and tune resolve at once', async () => {
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    expect(cpu.tuning).toBeNull();
    await cpu.settled();
    const mha = cpu.createMultiHeadAttention(layer, sd);
    await cpu.warmup();
    expect(await cpu.tune([{ layer: mha, seqLen: 8 }])).toBeNull();
    cpu.dispose();
  });
});

describe('the Tuner, with a fake gate and fake timings', () => {
  const plan = resolveForwardPlan(resolveLayerSpec(layer), x, { batchSize: B, seqLen: S });
  const cls = (kernel: KernelName) => shapeClass(kernel, plan, 'f32');
  const fakeTimes: Record<string, number> = {
    'register-4x4': 5,
    'register-8x8': 1,
    'workgroup-64': 3,
    'workgroup-128': 3.5,
    'rows32-keys32': 4,
    'rows64-keys32': 2,
    'rows32-keys32-loop': 8,
    'rows32-keys32-r2': 6,
    'rows32-keys32-r4': 9,
    'rows64-keys32-r4': 7,
    'subgroup-4x4': 4,
    'subgroup-8x4': 4,
    'subgroup-16x4': 4,
    'rows16-keys32-sg': 10,
    'rows32-keys4-r4-unrolled': 11,
  };
  /** A sweep's device work (the scheduler makes one per sweep): a fake gate and fake timings. */
  const fakeTrial = (timed: string[] = [], gate: Gate = async () => null) => ({
    gate,
    time: async (_k: string, v: string, repeat = 1) => {
      timed.push(v);
      return fakeTimes[v] * repeat;
    },
  });
  /** The adapter a tuner is told about (data, as the scheduler passes the device state's). */
  const adapterOf = (kind: AdapterKind, subgroups = false, key = 'fake adapter'): TuningAdapter => ({ key, kind, subgroups });
  const newTuner = () => new Tuner({ mode: 'auto', forced: {}, store: null });

  test('a variant the gate refuses is never timed or chosen, and the report says why', async () => {
    const timed: string[] = [];
    const gate: Gate = async (_kernel, variant) => (variant === 'register-8x8' ? 'output[3] = 7, the float64 reference says 1' : null);
    const qkv = await newTuner().sweep(adapterOf('gpu'), 'qkv_projection', cls('qkv_projection'), 32, 'f32', fakeTrial(timed, gate));
    expect(timed).not.toContain('register-8x8');
    expect(qkv.refused).toEqual({ 'register-8x8': 'output[3] = 7, the float64 reference says 1' });
    expect(Object.keys(qkv.timesMs!).sort()).toEqual(['register-4x4', 'workgroup-128', 'workgroup-64']);
    expect(qkv.variant).toBe('workgroup-64'); // the built-in GPU choice, and the fastest left
  });

  test('only the candidates of the adapter kind are compiled and timed', async () => {
    const timed: string[] = [];
    await newTuner().sweep(adapterOf('unrolling-cpu'), 'flash_attention', cls('flash_attention'), 32, 'f32', fakeTrial(timed));
    expect([...new Set(timed)].sort()).toEqual([...candidates('unrolling-cpu', 'flash_attention')].sort());
    expect(timed).not.toContain('rows32-keys32-loop');
  });

  test('on a GPU no software variant (src/webgpu/software/) is a candidate, and a sweep gates and times none', async () => {
    const software = [...PROJECTION_VARIANTS, ...ATTENTION_VARIANTS].filter(isSoftwareVariant);
    expect(software.sort()).toEqual([
      'gemv-rows',
      'gemv-rows-subgroup',
      'rows128-keys4-r4-shuffle',
      'rows32-keys4-r4-unrolled',
      'rows64-keys4-r2-shuffle',
      'subgroup-16x4',
    ]);
    for (const subgroups of [false, true]) {
      for (const kernel of KERNEL_NAMES) expect(candidates('gpu', kernel, subgroups).filter(isSoftwareVariant)).toEqual([]);
      const [timed, gated]: string[][] = [[], []];
      const gate: Gate = async (_k, variant) => {
        gated.push(variant);
        return null;
      };
      const tuner = newTuner();
      for (const kernel of KERNEL_NAMES) await tuner.sweep(adapterOf('gpu', subgroups), kernel, cls(kernel), 32, 'f32', fakeTrial(timed, gate));
      expect(gated.filter(isSoftwareVariant)).toEqual([]);
      expect(timed.filter(isSoftwareVariant)).toEqual([]);
      expect(timed).toContain(subgroups ? 'rows16-keys32-sg' : 'workgroup-64'); // the sweep did run
    }
    // On CPU adapters they are: SwiftShader's unrolled body, lavapipe's shuffle bodies and FMA GEMM.
    expect(candidates('jit-cpu', 'flash_attention')).toContain('rows32-keys4-r4-unrolled');
    expect(candidates('unrolling-cpu', 'flash_attention', true)).toEqual(['rows64-keys4-r2-shuffle', 'rows128-keys4-r4-shuffle']);
    expect(candidates('unrolling-cpu', 'qkv_projection', true)).toContain('subgroup-16x4');
  });

  test('subgroup variants are gated and timed only where the device has the subgroups feature', async () => {
    for (const subgroups of [false, true]) {
      const [timed, gated]: string[][] = [[], []];
      const gate: Gate = async (_k, variant) => {
        gated.push(variant);
        return null;
      };
      const tuner = newTuner();
      for (const kernel of ['qkv_projection', 'flash_attention'] as const)
        await tuner.sweep(adapterOf('gpu', subgroups), kernel, cls(kernel), 32, 'f32', fakeTrial(timed, gate));
      const offered = ['subgroup-4x4', 'rows16-keys32-sg'];
      expect(offered.filter((v) => gated.includes(v))).toEqual(subgroups ? offered : []);
      expect(offered.filter((v) => timed.includes(v))).toEqual(subgroups ? offered : []);
      expect(candidates('unrolling-cpu', 'qkv_projection', subgroups).includes('subgroup-4x4')).toBe(subgroups);
      expect(candidates('jit-cpu', 'flash_attention', subgroups).some(needsSubgroups)).toBe(false); // measured: far slower there
    }
  });

  test('a clear and consistent winner replaces the built-in choice; it is remembered for the class', async () => {
    const tuner = newTuner();
    const gpu = adapterOf('gpu');
    const flash = await tuner.sweep(gpu, 'flash_attention', cls('flash_attention'), 32, 'f32', fakeTrial());
    expect(flash.variant).toBe('rows64-keys32'); // the built-in GPU choice is already the fastest here
    const qkv = await tuner.sweep(gpu, 'qkv_projection', cls('qkv_projection'), 32, 'f32', fakeTrial());
    expect(qkv.variant).toBe('register-8x8'); // 1 ms against the built-in workgroup-64's 3
    expect(qkv.steady).toBe(true);
    expect(tuner.known(gpu, 'qkv_projection', cls('qkv_projection'))).toEqual(qkv);
  });

  test('steady choices are saved and a new tuner finds them in the store; a noisy one is not saved', async () => {
    let records: Record<string, TuningChoice> = {};
    const store: TuningStore = {
      where: 'test',
      load: async () => structuredClone(records),
      save: async (r) => {
        records = structuredClone(r);
      },
    };
    const make = () => new Tuner({ mode: 'auto', forced: {}, store });
    const a = adapterOf('gpu', false, 'A');
    const tuner = make();
    await tuner.load();
    await tuner.sweep(a, 'qkv_projection', cls('qkv_projection'), 32, 'f32', fakeTrial());
    const noise = [5, 9, 12, 15, 14, 5, 7];
    let n = 0;
    const noisy = { gate: async () => null, time: async (_k: string, v: string, repeat = 1) => repeat * (v === 'register-4x4' ? noise[n++ % noise.length] : 10) };
    const out = await tuner.sweep(a, 'output_projection', cls('output_projection'), 32, 'f32', noisy);
    expect([out.variant, out.steady]).toEqual(['workgroup-64', false]);
    expect(Object.values(records).map((r) => r.kernel)).toEqual(['qkv_projection']);
    const next = make();
    await next.load();
    expect(next.known(a, 'qkv_projection', cls('qkv_projection'))?.source).toBe('store');
    expect(next.known(a, 'output_projection', cls('output_projection'))).toBeUndefined();
  });

  test('when the gate refuses every variant the built-in choice stays, with the reasons', async () => {
    const qkv = await newTuner().sweep(
      adapterOf('gpu'),
      'qkv_projection',
      cls('qkv_projection'),
      32,
      'f32',
      fakeTrial([], async () => 'wrong'),
    );
    expect(qkv.variant).toBe('workgroup-64');
    expect(Object.keys(qkv.refused!).sort()).toEqual([...candidates('gpu', 'qkv_projection')].sort());
  });

  test('concurrent sweeps of one class are one sweep; another adapter sweeps again', async () => {
    let gates = 0;
    const gate: Gate = async () => {
      gates++;
      return null;
    };
    const tuner = newTuner();
    const [A, B] = [adapterOf('gpu', false, 'A'), adapterOf('gpu', false, 'B')];
    const [a, b] = await Promise.all([
      tuner.sweep(A, 'qkv_projection', cls('qkv_projection'), 32, 'f32', fakeTrial([], gate)),
      tuner.sweep(A, 'qkv_projection', cls('qkv_projection'), 32, 'f32', fakeTrial([], gate)),
    ]);
    expect(a).toBe(b);
    expect(gates).toBe(candidates('gpu', 'qkv_projection').length);
    expect(tuner.entries(A)).toHaveLength(1);
    expect(tuner.entries(B)).toEqual([]);
    expect(tuner.known(B, 'qkv_projection', cls('qkv_projection'))).toBeUndefined();
  });
});

describe('measure.decide: clearly, consistently, and never on noise', () => {
  const steady = (ms: number) => [ms, ms * 1.01, ms * 1.02, ms, ms * 1.01];

  test('a winner by more than the margin in every round replaces the built-in choice', () => {
    const d = decide({ builtIn: steady(10), fast: steady(7) }, 'builtIn');
    expect([d.variant, d.steady]).toEqual(['fast', true]);
    expect(d.timesMs).toEqual({ builtIn: 10, fast: 7 });
  });

  test('a winner by less than the margin does not', () => {
    const d = decide({ builtIn: steady(10), fast: steady(10 * (1 - MARGIN / 2)) }, 'builtIn');
    expect([d.variant, d.steady]).toEqual(['builtIn', true]);
    expect(d.reason).toMatch(/faster by 5% only/);
  });

  test('a winner in too few rounds does not', () => {
    // Fastest run far ahead, but it lost three rounds of five run against run.
    const d = decide({ builtIn: [10, 10, 10, 10, 10], fast: [6, 6, 11, 11, 11] }, 'builtIn');
    expect(d.variant).toBe('builtIn');
  });

  test('noisy runs decide nothing and are marked unsteady (not remembered)', () => {
    const d = decide({ builtIn: steady(10), fast: [5, 9, 12, 15, 14] }, 'builtIn');
    expect([d.variant, d.steady]).toEqual(['builtIn', false]);
    expect(d.spreads.fast).toBeGreaterThan(MAX_SPREAD);
    expect(d.reason).toMatch(/too noisy/);
  });

  test("a wall clock at a completion timer's floor decides nothing (Firefox: every candidate 99–100 ms)", () => {
    const floor = { builtIn: [100.2, 99.8, 100.1, 100, 99.9], fast: [99.1, 99.4, 100.3, 99.2, 99.6] };
    const d = decide(floor, 'builtIn', { kind: 'wall-clock', stepMs: 0 });
    expect([d.variant, d.steady]).toEqual(['builtIn', false]);
    expect(d.unusable).toMatch(/a floor/);
    expect(d.reason).toMatch(/^timings unusable/);
    // The same figures from the GPU's timestamps are kernels that really take that long: no floor.
    expect(decide(floor, 'builtIn', { kind: 'gpu-timestamps', stepMs: 0 }).unusable).toBeUndefined();
  });

  test("candidates within the wall clock's known step of each other decide nothing; further apart they do", () => {
    const within = decide({ builtIn: steady(10), fast: steady(7) }, 'builtIn', { kind: 'wall-clock', stepMs: 4 });
    expect([within.variant, within.steady]).toEqual(['builtIn', false]);
    expect(within.unusable).toMatch(/within the wall clock's step here \(4 ms/);
    const apart = decide({ builtIn: steady(20), fast: steady(7) }, 'builtIn', { kind: 'wall-clock', stepMs: 4 });
    expect([apart.variant, apart.steady, apart.unusable]).toEqual(['fast', true, undefined]);
  });

  test('with the built-in choice refused, the fastest correct one runs', () => {
    expect(decide({ a: steady(3), b: steady(2) }, 'builtIn').variant).toBe('b');
  });

  test('interleave rotates the order every round', async () => {
    const order: string[] = [];
    await interleave(
      ['a', 'b', 'c'],
      async (v) => {
        order.push(v);
        return 1;
      },
      3,
    );
    expect(order.join('')).toBe('abcbcacab');
  });
});

describe('createAttentionEngine({ tuning }) errors', () => {
  test.each([
    [{ tuning: 'fast' }, 'options.tuning', 'an object'],
    [{ tuning: { mode: 'sometimes' } }, 'options.tuning.mode', '"auto", "off" or left out'],
    [{ tuning: { background: 'yes' } }, 'options.tuning.background', 'true, false or left out'],
    [{ tuning: { kernels: { flash_attention: 'rows8' } } }, 'options.tuning.kernels.flash_attention', '"rows32-keys32"'],
    [{ tuning: { kernels: { softmax: 'x' } } }, 'options.tuning.kernels', 'softmax'],
    [{ tuning: { store: {} } }, 'options.tuning.store', 'load() and save()'],
    [{ tuning: { speed: 1 } }, 'options.tuning', 'speed'],
    [{ backend: 'cpu', tuning: { mode: 'off' } }, 'options.tuning', "left out with backend: 'cpu'"],
  ])('%o', async (options, argument, expected) => {
    const error = await createAttentionEngine(options as never).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain(argument);
    expect((error as Error).message).toContain(expected);
  });
});

describe('timing trials stand for the whole call', () => {
  const spec = resolveLayerSpec({ embedDim: 64, numHeads: 4 });
  const call = (seqLen: number, isCausal: boolean) => shapePlan(spec, { batchSize: 2, seqLen, kvSeqLen: seqLen, isCausal });

  test('a long causal call is timed on the rows around its middle, which see as many keys on average', () => {
    const trial = attentionTrialPlan(call(2048, true));
    expect([trial.seqLen, trial.kvSeqLen, trial.mode]).toEqual([TRIAL_ROWS, 1024 + TRIAL_ROWS / 2, 'cross']);
    expect(trial.geometry).toEqual(geometryOf('cross', 2, TRIAL_ROWS, 1024 + TRIAL_ROWS / 2));
    // Row i of the trial sees i + Skv − Sq + 1 keys (queries aligned with the last keys): 769 … 1280, mean 1024.5,
    // as the whole call's rows (1 … 2048, mean 1024.5).
    const seen = (i: number) => i + trial.kvSeqLen - trial.seqLen + 1;
    expect((seen(0) + seen(TRIAL_ROWS - 1)) / 2).toBe((1 + 2048) / 2);
    // A window bands the rows the same way.
    const windowed = call(4096, false);
    expect(attentionTrialPlan({ ...windowed, masks: { ...windowed.masks, window: 256 } }).seqLen).toBe(TRIAL_ROWS);
  });

  test('calls whose rows all see the same keys, short ones and those with mask data keep their own rows', () => {
    for (const plan of [call(2048, false), call(TRIAL_ROWS, true)]) {
      const trial = attentionTrialPlan(plan);
      expect([trial.seqLen, trial.kvSeqLen, trial.mode]).toEqual([plan.seqLen, plan.kvSeqLen, plan.mode]);
    }
    const long = call(1024, true);
    const padded = { ...long, masks: { ...long.masks, keyPaddingMask: new Uint8Array(2 * 1024) } };
    expect(attentionTrialPlan(padded).seqLen).toBe(1024);
    // What ties a call to its caller never reaches a trial.
    expect(attentionTrialPlan({ ...long, needWeights: true, returnBuffer: true }).needWeights).toBe(false);
  });

  test('the trial of a long causal call runs on the adapter without errors, for every candidate', async () => {
    const device = owner.device!;
    const pool = new BufferPool(device, 'trial test');
    const plan = call(1100, true);
    try {
      const kind = adapterKind(owner.adapterInfo!);
      for (const variant of candidates(kind, 'flash_attention', device.features.has('subgroups'))) {
        const ms = await withErrorScopes(device, () => timeKernel(pool, plan, 'flash_attention', variant));
        expect(ms).toBeGreaterThan(0);
      }
    } finally {
      pool.destroyAll();
    }
  });
});
