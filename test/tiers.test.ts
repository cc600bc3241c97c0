// Tiers: what a call runs while its final kernels compile. The first call of a shape never waits for
// a sweep or for the slow-to-compile final kernels: it runs tier 0 (variants.ts TIER0) and the final
// ones compile in the background; engine.settled() waits for them. Driven with a fake backend (which
// variants a call gets, and when) and on the real adapter (every output correct across the switch,
// concurrent calls included; warmup with progress; argument errors).

import { describe, expect, test } from 'vitest';
import { createAttentionEngine, InvalidArgumentError } from '../src/index.ts';
import { resolveForwardPlan, resolveLayerSpec } from '../src/plan/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { defineBindings } from '../src/webgpu/bindings.ts';
import type { DeviceState } from '../src/webgpu/device.ts';
import { KernelScheduler } from '../src/webgpu/tuning/scheduler.ts';
import type { ResolvedTuning } from '../src/webgpu/tuning/tuner.ts';
import {
  type AdapterKind,
  candidates,
  defaultChoice,
  FEW_QUERY_ROWS,
  inLineChoice,
  isSoftwareVariant,
  KERNEL_NAMES,
  SHORT_QUERY_ROWS,
  TIER0,
} from '../src/webgpu/variants.ts';
import { referenceMultiHeadAttention } from '../src/cpu/reference.ts';
import { useEngines } from './helpers/engines.ts';
import { watchDevice, withErrorScopes } from './helpers/gpu.ts';

const layer = { embedDim: 64, numHeads: 2 };
const FAKE_BINDINGS = defineBindings('Fake', []);
const sd = randomStateDict(layer, 7);

/** A device that builds nothing real: the scheduler only needs pipelines to be created and to resolve. */
function fakeDevice(features: string[] = [], built: string[] = []): GPUDevice {
  return {
    features: new Set<string>(features), // none by default: the built-in choices without subgroups
    createShaderModule: () => ({}),
    createComputePipelineAsync: async (d: GPUComputePipelineDescriptor) => {
      built.push(d.label!);
      return {};
    },
    createComputePipeline: (d: GPUComputePipelineDescriptor) => {
      built.push(d.label!);
      return {};
    },
    createBindGroupLayout: () => ({}),
    createPipelineLayout: () => ({}),
  } as unknown as GPUDevice;
}

/**
 * A scheduler on a fake device of one adapter `kind`: its state says the kind (as the runtime's state
 * says its one adapter's), so the built-in choice a sweep must beat and the candidates it times belong
 * to the same adapter. The device work (pipelines, trials, gates) is stand-ins given at construction.
 */
function fakeBackend(tuning: ResolvedTuning, kind: AdapterKind = 'cpu', features: string[] = [], trialMs = 0, inLine: string | null = null, software?: boolean) {
  /** Pipelines built (compiled), by label: `kernel.variant.pipeline`. */
  const built: string[] = [];
  const adapter = {
    info: { vendor: '', architecture: '', device: '', description: '' },
    key: 'fake',
    kind,
    software: software ?? kind !== 'gpu',
    subgroups: features.includes('subgroups'),
  };
  const state = {
    device: fakeDevice(features, built),
    pool: { precision: 'f32', trim() {} },
    generation: 0,
    adapter,
    lost: null,
    retired: false,
  } as unknown as DeviceState;
  const ran: string[] = [];
  const scheduler = new KernelScheduler(tuning, {
    pipelinesOf: (_s, _p, kernel, variant) => [{ key: `${kernel}.${variant}`, label: `${kernel}.${variant}`, code: `${kernel} ${variant}`, bindings: FAKE_BINDINGS }],
    time: async (_s, _p, kernel, variant, repeat = 1) => {
      ran.push(`${kernel} ${variant}`);
      if (trialMs) await new Promise((r) => setTimeout(r, trialMs));
      return repeat * (variant === 'register-4x4' ? 1 : 2);
    },
    gate: async () => null,
    clock: () => ({ kind: 'gpu-timestamps', stepMs: 0 }), // the fake times are exact
    compilesInLine: () => inLine,
  });
  return { state, scheduler, ran, built };
}

describe('the scheduler, with a fake backend', () => {
  const plan = resolveForwardPlan(resolveLayerSpec(layer), uniform(10 * 64, 1, mulberry32(1)), { batchSize: 1, seqLen: 10 });
  const built = defaultChoice('cpu'); // register-8x8, rows64-keys32-r4, register-8x8

  test('the first call runs tier 0 and returns at once; after settled() the final kernels run', async () => {
    const { state, scheduler, ran } = fakeBackend({ mode: 'auto', forced: {}, store: null });
    expect(await scheduler.choose(state, plan, KERNEL_NAMES)).toEqual(TIER0);
    expect(ran).toEqual([]); // nothing ran yet: the call did not wait for the background
    expect(scheduler.pending).toBeGreaterThan(0);
    await scheduler.settled();
    expect(scheduler.pending).toBe(0);
    const after = await scheduler.choose(state, plan, KERNEL_NAMES);
    // The sweeps measured register-4x4 clearly faster than the built-in 8x8 for both projections
    // (1 against 2 in every round); attention keeps the built-in choice (no candidate beat it).
    expect(after).toEqual({ qkv_projection: 'register-4x4', flash_attention: built.flash_attention, output_projection: 'register-4x4' });
    expect(scheduler.compiled.map((c) => `${c.kernel} ${c.variant}`)).toEqual(KERNEL_NAMES.map((k) => `${k} ${built[k]}`));
    expect(scheduler.failures).toEqual([]);
    // The sweeps timed this adapter kind's candidates (and no other kind's), each measured against this
    // kind's built-in choice: a tuner told another kind than the scheduler would time another set and
    // compare against another built-in variant (for 'unrolling-cpu': 4×4, which would then "stay").
    for (const kernel of KERNEL_NAMES) {
      const timed = new Set(ran.filter((r) => r.startsWith(`${kernel} `)).map((r) => r.slice(kernel.length + 1)));
      expect([...timed].sort(), kernel).toEqual([...new Set([built[kernel], ...candidates('cpu', kernel)])].sort());
    }
    const swept = Object.fromEntries(scheduler.tuner.entries(state.adapter).map((e) => [e.kernel, e]));
    expect(swept.qkv_projection.note).toMatch(/^register-4x4 is .* faster than the built-in register-8x8/);
    expect(swept.output_projection.note).toMatch(/^register-4x4 is .* faster than the built-in register-8x8/);
    expect(swept.flash_attention.variant).toBe(built.flash_attention); // every attention variant ties: the built-in one stays
  });

  describe('where the implementation compiles on the thread that serves the device (wgpu)', () => {
    const wgpu = 'wgpu (test)';

    test('nothing runs in the background: each call runs its final choice, compiled in line', async () => {
      const { state, scheduler, ran, built: compiled } = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'cpu', [], 0, wgpu);
      expect(scheduler.background()).toEqual({ enabled: false, why: expect.stringContaining('wgpu (test) compiles a pipeline on the thread') });
      // On a CPU adapter the in-line choice is tier 0's variants (the built-in ones take seconds to compile there).
      expect(await scheduler.choose(state, plan, KERNEL_NAMES)).toEqual(inLineChoice('cpu'));
      expect(inLineChoice('cpu')).toEqual(TIER0);
      expect(scheduler.pending).toBe(0);
      await scheduler.settled();
      expect(ran).toEqual([]); // no compile-and-run, no sweep
      expect(compiled).toEqual([]); // nothing compiled ahead: the call's own pipelines compile where it uses them
      expect(scheduler.tuner.entries(state.adapter)).toEqual([]);
      expect(await scheduler.choose(state, plan, KERNEL_NAMES)).toEqual(TIER0);
    });

    test('on a GPU the in-line choice is the built-in one; with mode off, the built-in one anywhere', async () => {
      const gpu = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'gpu', [], 0, wgpu);
      expect(await gpu.scheduler.choose(gpu.state, plan, KERNEL_NAMES)).toEqual(defaultChoice('gpu'));
      expect(gpu.ran).toEqual([]);
      // An adapter whose info names nothing (kind 'gpu') but says it is a fallback one (Firefox on lavapipe): a CPU's.
      const fallback = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'gpu', [], 0, wgpu, true);
      expect(await fallback.scheduler.choose(fallback.state, plan, KERNEL_NAMES)).toEqual(TIER0);
      expect(inLineChoice('gpu', false, { queryRows: 1, keys: 30, rows: 1, packed: true }, true)).toEqual({
        ...TIER0,
        qkv_projection: 'gemv-rows',
        output_projection: 'gemv-rows',
      });
      // lavapipe with subgroups: its GEMV passes A between lanes, in line as in the background.
      expect(inLineChoice('unrolling-cpu', true, { queryRows: 1, keys: 30, rows: 1, packed: true }).qkv_projection).toBe('gemv-rows-subgroup');
      expect(inLineChoice('unrolling-cpu', false, { queryRows: 1, keys: 30, rows: 1, packed: true }).qkv_projection).toBe('gemv-rows');
      const off = fakeBackend({ mode: 'off', forced: {}, store: null }, 'cpu', [], 0, wgpu);
      expect(await off.scheduler.choose(off.state, plan, KERNEL_NAMES)).toEqual(built);
      // Forced variants run as forced.
      const forced = fakeBackend({ mode: 'auto', forced: { flash_attention: 'rows64-keys32' }, store: null }, 'cpu', [], 0, wgpu);
      expect(await forced.scheduler.choose(forced.state, plan, KERNEL_NAMES)).toEqual({ ...TIER0, flash_attention: 'rows64-keys32' });
    });

    test('engine.tune() still sweeps there, and later calls use what it chose', async () => {
      const { state, scheduler, ran } = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'cpu', [], 0, wgpu);
      await scheduler.tune(state, [plan], KERNEL_NAMES);
      expect(ran.length).toBeGreaterThan(0);
      expect(await scheduler.choose(state, plan, KERNEL_NAMES)).toEqual({ ...built, qkv_projection: 'register-4x4', output_projection: 'register-4x4' });
      expect(scheduler.pending).toBe(0);
    });

    test('tuning.background: true sweeps in the background anyway; false turns it off anywhere', async () => {
      const on = fakeBackend({ mode: 'auto', forced: {}, store: null, background: true }, 'cpu', [], 0, wgpu);
      expect(on.scheduler.background()).toEqual({ enabled: true, why: 'tuning.background: true' });
      expect(await on.scheduler.choose(on.state, plan, KERNEL_NAMES)).toEqual(TIER0);
      await on.scheduler.settled();
      expect(on.ran.length).toBeGreaterThan(0);
      const off = fakeBackend({ mode: 'auto', forced: {}, store: null, background: false });
      expect(off.scheduler.background().enabled).toBe(false);
      expect(await off.scheduler.choose(off.state, plan, KERNEL_NAMES)).toEqual(inLineChoice('cpu'));
      expect(off.scheduler.pending).toBe(0);
      // Dawn (no in-line compiles) with the default: background work, as before.
      expect(fakeBackend({ mode: 'auto', forced: {}, store: null }).scheduler.background().enabled).toBe(true);
    });
  });

  test('background work waits while a call is under way', async () => {
    const { state, scheduler, ran } = fakeBackend({ mode: 'auto', forced: {}, store: null });
    let finish!: () => void;
    scheduler.begin(); // a call under way (runtime.ts begin … end)
    const call = (async () => {
      await scheduler.choose(state, plan, KERNEL_NAMES);
      await new Promise<void>((resolve) => {
        finish = resolve;
      });
    })().finally(() => scheduler.end());
    await new Promise((r) => setTimeout(r, 20));
    expect(ran).toEqual([]);
    finish();
    await call;
    await scheduler.settled();
    expect(ran.length).toBeGreaterThan(0);
  });

  test('a sweep under way yields to a call between its trials: no trial starts while the call runs', async () => {
    const { state, scheduler, ran } = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'cpu', [], 2);
    await scheduler.choose(state, plan, KERNEL_NAMES);
    // Let the background start: its first trials run.
    while (ran.length < 8) await new Promise((r) => setTimeout(r, 1)); // past the 3 warm-ups: inside the first sweep
    let finish!: () => void;
    scheduler.begin();
    const call = new Promise<void>((resolve) => {
      finish = resolve;
    }).finally(() => scheduler.end());
    const started = ran.length;
    await new Promise((r) => setTimeout(r, 30));
    // At most the trial already in its `time` when the call came.
    expect(ran.length - started).toBeLessThanOrEqual(1);
    const during = ran.length;
    finish();
    await call;
    await scheduler.settled();
    expect(ran.length).toBeGreaterThan(during);
  });

  test('forced variants run at once, compiled in line; mode off runs the built-in choice and schedules nothing', async () => {
    const forced = fakeBackend({ mode: 'auto', forced: { flash_attention: 'rows32-keys32-r2' }, store: null });
    const first = await forced.scheduler.choose(forced.state, plan, KERNEL_NAMES);
    expect(first.flash_attention).toBe('rows32-keys32-r2');
    await forced.scheduler.settled();
    expect(forced.ran.filter((r) => r.startsWith('flash_attention'))).toEqual([]);

    const off = fakeBackend({ mode: 'off', forced: {}, store: null });
    expect(await off.scheduler.choose(off.state, plan, KERNEL_NAMES)).toEqual(built);
    expect(off.scheduler.pending).toBe(0);
  });
});

describe('on a GPU the scheduler and its sweeps compile no software kernel (src/webgpu/software/)', () => {
  test.each([[[]], [['subgroups']]])('features %j: warm-up, sweeps and calls build only GPU-set variants', async (features: string[]) => {
    const { state, scheduler, ran, built } = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'gpu', features);
    const plans = [1, 10, 100].map((seqLen) => resolveForwardPlan(resolveLayerSpec(layer), uniform(seqLen * 64, 1, mulberry32(seqLen)), { batchSize: 1, seqLen }));
    for (const plan of plans) await scheduler.choose(state, plan, KERNEL_NAMES);
    await scheduler.tune(state, plans, KERNEL_NAMES);
    await scheduler.warmup(state, plans, KERNEL_NAMES);
    await scheduler.settled();
    expect(scheduler.failures).toEqual([]);
    const variants = (names: string[]) => names.map((name) => name.split(' ')[1] ?? name.split('.')[1]);
    expect(ran.length).toBeGreaterThan(KERNEL_NAMES.length); // sweeps timed their candidates
    expect(variants(ran).filter(isSoftwareVariant)).toEqual([]);
    expect(built.length).toBeGreaterThan(0);
    expect(variants(built).filter(isSoftwareVariant)).toEqual([]);
  });
});

describe('the built-in attention kernel follows the size of the call where that was measured (lavapipe with subgroups)', () => {
  const planOf = (seqLen: number) => resolveForwardPlan(resolveLayerSpec(layer), uniform(seqLen * 64, 1, mulberry32(seqLen)), { batchSize: 1, seqLen });
  const attentionFor = (queryRows: number, keys: number, subgroups = true) => defaultChoice('unrolling-cpu', subgroups, { queryRows, keys }).flash_attention;

  test('defaultChoice: lanes sharing a row up to FEW_QUERY_ROWS rows (16 over as many keys), K/V shuffled between lanes past it (2 rows a lane up to SHORT_QUERY_ROWS)', () => {
    // Each bound is where the kernel changes (over many keys): the last row count of one kernel, the first of the next.
    expect([FEW_QUERY_ROWS, FEW_QUERY_ROWS + 1, SHORT_QUERY_ROWS, SHORT_QUERY_ROWS + 1].map((rows) => attentionFor(rows, 4096))).toEqual([
      'rows16-keys32-sg',
      'rows64-keys4-r2-shuffle',
      'rows64-keys4-r2-shuffle',
      'rows128-keys4-r4-shuffle',
    ]);
    for (const rows of [1, 4, 8]) expect(attentionFor(rows, 4096)).toBe('rows16-keys32-sg');
    for (const rows of [9, 16]) expect(attentionFor(rows, 16)).toBe('rows16-keys32-sg'); // a few µs of work: the smaller dispatch wins
    for (const [rows, keys] of [
      [9, 17],
      [16, 1040],
      [64, 64],
      [64, 4096],
    ])
      expect(attentionFor(rows, keys)).toBe('rows64-keys4-r2-shuffle');
    for (const rows of [65, 512]) expect(attentionFor(rows, rows)).toBe('rows128-keys4-r4-shuffle');
    expect(defaultChoice('unrolling-cpu', true).flash_attention).toBe('rows128-keys4-r4-shuffle'); // no size given: a prompt's
    // Without subgroups, and on other adapter kinds, the size changes nothing.
    for (const rows of [1, 512]) {
      expect(defaultChoice('unrolling-cpu', false, { queryRows: rows, keys: rows })).toEqual(defaultChoice('unrolling-cpu', false));
      for (const kind of ['jit-cpu', 'cpu', 'gpu'] as const) expect(defaultChoice(kind, true, { queryRows: rows, keys: rows })).toEqual(defaultChoice(kind, true));
    }
  });

  test('the scheduler runs the choice of each call: a decode-sized call and a prompt get different kernels', async () => {
    const { state, scheduler } = fakeBackend({ mode: 'off', forced: {}, store: null }, 'unrolling-cpu', ['subgroups']);
    expect((await scheduler.choose(state, planOf(1), KERNEL_NAMES)).flash_attention).toBe('rows16-keys32-sg');
    expect((await scheduler.choose(state, planOf(16), KERNEL_NAMES)).flash_attention).toBe('rows16-keys32-sg');
    expect((await scheduler.choose(state, planOf(40), KERNEL_NAMES)).flash_attention).toBe('rows64-keys4-r2-shuffle');
    expect((await scheduler.choose(state, planOf(100), KERNEL_NAMES)).flash_attention).toBe('rows128-keys4-r4-shuffle');
    // A sweep of a few-row class compares against the few-row built-in choice.
    const auto = fakeBackend({ mode: 'auto', forced: {}, store: null }, 'unrolling-cpu', ['subgroups']);
    expect(auto.scheduler.tuner.candidatesOf(auto.state.adapter, 'flash_attention', { queryRows: 1, keys: 1000 })).toContain('rows16-keys32-sg');
    expect(auto.scheduler.tuner.candidatesOf(auto.state.adapter, 'flash_attention', { queryRows: 100, keys: 100 })).toEqual([
      'rows64-keys4-r2-shuffle',
      'rows128-keys4-r4-shuffle',
    ]);
  });
});

const engines = useEngines('webgpu');

describe('tiers on the real adapter', () => {
  const [B, S] = [2, 23];
  const x = uniform(B * S * layer.embedDim, 1, mulberry32(3));
  const expected = referenceMultiHeadAttention(layer, sd, x, { batchSize: B, seqLen: S }).output;
  const tolerance = f32Tolerance([layer.embedDim, S, layer.embedDim]);

  test('every output is right before, during and after the switch to the final kernels, concurrent calls included', async () => {
    const engine = await createAttentionEngine({ device: engines.gpu.device!, tuning: { store: null } });
    watchDevice(engine.device!);
    const mha = engine.createMultiHeadAttention(layer, sd);
    const forward = async () => {
      const { output } = await withErrorScopes(engine.device!, () => mha.forward(x, { batchSize: B, seqLen: S }));
      expectClose(output, expected, tolerance);
    };
    await Promise.all([forward(), forward(), forward()]);
    let settled = false;
    const settling = engine.settled().then(() => {
      settled = true;
    });
    let during = 0;
    const deadline = performance.now() + 240_000;
    while (!settled && performance.now() < deadline) {
      await Promise.all([forward(), forward()]);
      during += 2;
    }
    await settling;
    expect(during).toBeGreaterThan(0);
    // The final kernels were compiled in the background, so the first calls ran tier 0.
    expect(engine.tuning!.compiled.length).toBeGreaterThan(0);
    expect(engine.tuning!.failures).toEqual([]);
    await Promise.all([forward(), forward()]);
    engine.dispose();
  }, 300_000);

  test('warmup compiles the final kernels with progress; later calls start no background work', async () => {
    const engine = await createAttentionEngine({ device: engines.gpu.device!, tuning: { store: null } });
    watchDevice(engine.device!);
    const mha = engine.createMultiHeadAttention({ embedDim: 48, numHeads: 2 }, randomStateDict({ embedDim: 48, numHeads: 2 }, 2));
    const progress: string[] = [];
    await engine.warmup([{ layer: mha, batchSize: 1, seqLen: 9 }], { onProgress: (p) => progress.push(`${p.done}/${p.total} ${p.kernel}`) });
    expect(progress).toEqual(['1/3 qkv_projection', '2/3 flash_attention', '3/3 output_projection']);
    await engine.tune([{ layer: mha, seqLen: 9 }]);
    expect(engine.tuning!.pending).toBe(0);
    await mha.forward(uniform(9 * 48, 1, mulberry32(4)), { batchSize: 1, seqLen: 9 });
    expect(engine.tuning!.pending).toBe(0); // warm and tuned: nothing new to do
    engine.dispose();
  }, 300_000);

  test('bad warmup and tune arguments are typed errors before any GPU work', async () => {
    const engine = await createAttentionEngine({ device: engines.gpu.device!, tuning: { mode: 'off' } });
    const mha = engine.createMultiHeadAttention(layer, sd);
    const other = engines.gpu.createMultiHeadAttention(layer, sd);
    const cases: [() => Promise<unknown>, string][] = [
      [() => engine.warmup('all' as never), 'calls'],
      [() => engine.warmup([{ layer: other, seqLen: 4 }]), 'calls[0].layer'],
      [() => engine.warmup([{ layer: mha, seqLen: 0 }]), 'calls[0].seqLen'],
      [() => engine.warmup([{ layer: mha, seqLen: 4, heads: 2 } as never]), 'calls[0]'],
      [() => engine.tune([{ layer: mha, seqLen: 4, isCausal: 'yes' as never }]), 'calls[0].isCausal'],
      [() => engine.warmup([], { onProgress: 3 as never }), 'options.onProgress'],
    ];
    for (const [call, argument] of cases) {
      const error = await call().then(
        () => null,
        (e: unknown) => e,
      );
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toContain(argument);
    }
    other.dispose();
    engine.dispose();
  });
});
