// Kernel variant tuning: the sweep on first use (gate, then timing), remembering (memory, a store, the
// default file in Node), the caller's overrides, and the errors of the `tuning` option. The Tuner's
// logic is also driven directly with a fake gate and fake timings, to show a refused variant is never
// timed or chosen and that concurrent calls share one sweep.

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
import { resolveForwardPlan, resolveLayerSpec } from '../src/plan/index.ts';
import { mulberry32, randomStateDict, uniform } from '../src/util/random.ts';
import { gateVariant } from '../src/webgpu/tuning/gate.ts';
import { shapeClass, Tuner, TUNING_VERSION } from '../src/webgpu/tuning/tuner.ts';
import { KERNEL_NAMES, VARIANTS } from '../src/webgpu/variants.ts';
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

describe('tuning on a real adapter', () => {
  test('the first forward sweeps each kernel: every variant gated and timed, the fastest chosen and saved', async () => {
    const store = countingStore();
    const engine = await engineWith({ store });
    expect(engine.tuning!.mode).toBe('auto');
    expect(engine.tuning!.choices).toEqual([]);
    await forwardChecked(engine);
    const choices = engine.tuning!.choices;
    expect(choices.map((c) => c.kernel).sort()).toEqual([...KERNEL_NAMES].sort());
    const plan = resolveForwardPlan(resolveLayerSpec(layer), x, { batchSize: B, seqLen: S });
    for (const c of choices) {
      expect(c.source).toBe('sweep');
      expect(c.refused).toBeUndefined(); // every variant is correct on this adapter
      expect(Object.keys(c.timesMs!).sort()).toEqual([...VARIANTS[c.kernel]].sort());
      const fastest = Object.entries(c.timesMs!).reduce((a, b) => (b[1] < a[1] ? b : a))[0];
      expect(c.variant).toBe(fastest);
      expect(c.shapeClass).toBe(shapeClass(c.kernel, plan, 'f32'));
    }
    expect(store.saves).toBeGreaterThan(0);
    const keys = Object.keys(store.records!);
    expect(keys).toHaveLength(3);
    for (const key of keys) expect(key.startsWith(`v${TUNING_VERSION}|`)).toBe(true);

    // The same shape class again: no new sweep.
    const saves = store.saves;
    await forwardChecked(engine);
    expect(store.saves).toBe(saves);
    engine.dispose();

    // A new engine with the same store reuses the choices without sweeping.
    const again = await engineWith({ store });
    await forwardChecked(again);
    expect(again.tuning!.choices.map((c) => [c.kernel, c.variant, c.source]).sort()).toEqual(choices.map((c) => [c.kernel, c.variant, 'store']).sort());
    expect(store.saves).toBe(saves);
    again.dispose();
  });

  test('a file store keeps the choices between engines; the default store in Node is a file under XDG_CACHE_HOME', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'tuning-')), 'sub', 'tuning.json');
    const engine = await engineWith({ store: fileTuningStore(path) });
    expect(engine.tuning!.store).toBe(path);
    await forwardChecked(engine);
    engine.dispose();
    expect(existsSync(path)).toBe(true);
    const saved = JSON.parse(readFileSync(path, 'utf8')) as Record<string, TuningChoice>;
    expect(
      Object.values(saved)
        .map((c) => c.kernel)
        .sort(),
    ).toEqual([...KERNEL_NAMES].sort());

    const again = await engineWith({ store: fileTuningStore(path) });
    await forwardChecked(again);
    expect(again.tuning!.choices.every((c) => c.source === 'store')).toBe(true);
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
    expect(engine.tuning!.choices.every((c) => c.source === 'sweep')).toBe(true);
    engine.dispose();
    const records = JSON.parse(readFileSync(path, 'utf8')) as Record<string, TuningChoice>;
    // Move every record to an older version and make one name a variant that does not exist.
    const old = Object.fromEntries(Object.entries(records).map(([k, v]) => [k.replace(/^v\d+\|/, 'v0|'), v]));
    writeFileSync(path, JSON.stringify(old));
    const again = await engineWith({ store: fileTuningStore(path) });
    await forwardChecked(again);
    expect(again.tuning!.choices.every((c) => c.source === 'sweep')).toBe(true);
    again.dispose();
  });

  test('forced variants are used and never swept; mode off sweeps nothing', async () => {
    const kernels = { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-r2' } as const;
    const forced = await engineWith({ kernels, store: null });
    await forwardChecked(forced);
    expect(forced.tuning!.forced).toEqual(kernels);
    expect(forced.tuning!.store).toBe('memory');
    expect(forced.tuning!.choices.map((c) => c.kernel)).toEqual(['output_projection']);
    forced.dispose();

    const off = await engineWith({ mode: 'off' });
    await forwardChecked(off);
    expect(off.tuning!.choices).toEqual([]);
    expect(Object.values(off.tuning!.defaults).every((v, i) => (VARIANTS[KERNEL_NAMES[i]] as readonly string[]).includes(v))).toBe(true);
    off.dispose();
  });

  test('scaledDotProductAttention tunes the attention kernel alone', async () => {
    const engine = await engineWith({ store: null });
    const [H, Dh, n] = [2, 16, 40];
    const q = uniform(H * n * Dh, 1, mulberry32(1));
    await withErrorScopes(engine.device!, () => engine.scaledDotProductAttention(q, q, q, { batchSize: 1, numHeads: H, seqLen: n, headDim: Dh }));
    expect(engine.tuning!.choices.map((c) => c.kernel)).toEqual(['flash_attention']);
    engine.dispose();
  });

  test('the correctness gate passes every variant of every kernel on this adapter', async () => {
    const backend = (owner as unknown as { impl: { pool: Parameters<typeof gateVariant>[0] } }).impl;
    for (const kernel of KERNEL_NAMES) {
      for (const variant of VARIANTS[kernel]) {
        expect(await gateVariant(backend.pool, true, kernel, variant, 20), `${kernel} ${variant}`).toBeNull();
      }
    }
  });

  test('the CPU backend has no tuning', async () => {
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    expect(cpu.tuning).toBeNull();
    cpu.dispose();
  });
});

describe('the Tuner, with a fake gate and fake timings', () => {
  const plan = resolveForwardPlan(resolveLayerSpec(layer), x, { batchSize: B, seqLen: S });
  const fakeTimes: Record<string, number> = {
    'register-4x4': 5,
    'register-8x8': 1,
    'workgroup-64': 3,
    'rows32-keys32': 4,
    'rows64-keys32': 2,
    'rows32-keys32-r2': 6,
    'rows32-keys32-r4': 9,
    'rows64-keys32-r4': 7,
  };

  test('a variant the gate refuses is never timed or chosen, and the report says why', async () => {
    const timed: string[] = [];
    const tuner = new Tuner(
      { mode: 'auto', forced: {}, store: null },
      () => 'fake adapter',
      () => true,
      async (_kernel, variant) => (variant === 'register-8x8' ? 'output[3] = 7, the float64 reference says 1' : null),
    );
    const choice = await tuner.choose(plan, 'f32', KERNEL_NAMES, {
      time: async (_k, v) => {
        timed.push(v);
        return fakeTimes[v];
      },
    });
    expect(timed).not.toContain('register-8x8');
    expect(choice).toEqual({ qkv_projection: 'workgroup-64', flash_attention: 'rows64-keys32', output_projection: 'workgroup-64' });
    const qkv = tuner.entries().find((e) => e.kernel === 'qkv_projection')!;
    expect(qkv.refused).toEqual({ 'register-8x8': 'output[3] = 7, the float64 reference says 1' });
    expect(qkv.timesMs).toEqual({ 'register-4x4': 5, 'workgroup-64': 3 });
  });

  test('when the gate refuses every variant the built-in choice stays, with the reasons', async () => {
    const tuner = new Tuner(
      { mode: 'auto', forced: {}, store: null },
      () => 'fake adapter',
      () => false,
      async () => 'wrong',
    );
    const choice = await tuner.choose(plan, 'f32', ['qkv_projection'], { time: async () => 1 });
    expect(choice.qkv_projection).toBe('workgroup-64'); // the GPU default
    expect(Object.keys(tuner.entries()[0].refused!)).toEqual([...VARIANTS.qkv_projection]);
  });

  test('concurrent calls of one shape class share one sweep; another adapter sweeps again', async () => {
    let gates = 0;
    let adapter = 'A';
    const tuner = new Tuner(
      { mode: 'auto', forced: {}, store: null },
      () => adapter,
      () => true,
      async () => {
        gates++;
        return null;
      },
    );
    const trial = { time: async (_k: string, v: string) => fakeTimes[v] };
    const [a, b] = await Promise.all([tuner.choose(plan, 'f32', KERNEL_NAMES, trial), tuner.choose(plan, 'f32', KERNEL_NAMES, trial)]);
    expect(a).toEqual(b);
    // One gate per kernel and variant: the second call waited for the first one's sweep.
    expect(gates).toBe(VARIANTS.qkv_projection.length + VARIANTS.flash_attention.length + VARIANTS.output_projection.length);
    adapter = 'B';
    expect(tuner.entries()).toEqual([]);
    await tuner.choose(plan, 'f32', KERNEL_NAMES, trial);
    expect(tuner.entries()).toHaveLength(3);
  });
});

describe('createAttentionEngine({ tuning }) errors', () => {
  test.each([
    [{ tuning: 'fast' }, 'options.tuning', 'an object'],
    [{ tuning: { mode: 'sometimes' } }, 'options.tuning.mode', '"auto", "off" or left out'],
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
