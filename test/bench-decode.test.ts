// The benchmark's decode presets (BenchShape.cacheLen): one step over a KV cache on this engine's
// backends, gated like every shape against the float64 CPU backend (which a wrong system fails); the
// peers, which take no KV cache, are listed as not run; FLOPs count the keys the new rows see; the
// cache a system steps on is made again from the past before it runs out, so that later runs see the
// same cache as the first.

import { expect, test } from 'vitest';
import { PRESETS } from '../demo/bench/presets.ts';
import { benchInputs, runBenchmark } from '../demo/bench/runner.ts';
import { cpuSystem } from '../demo/bench/systems/cpu.ts';
import { engineSystem } from '../demo/bench/systems/engine.ts';
import { layerRun } from '../demo/bench/systems/layer-run.ts';
import { wasmSystem } from '../demo/bench/systems/wasm.ts';
import type { BenchShape, BenchSystem } from '../demo/bench/types.ts';
import { createAttentionEngine } from '../src/index.ts';
import { attentionFlops, attentionFlopTerms } from '../demo/bench/flops.ts';

const peer: BenchSystem = {
  id: 'peer',
  label: 'a peer',
  prepare: async () => {
    throw new Error('a system without kvCache is never prepared for a decode shape');
  },
};

test('a decode shape runs on the systems that take a KV cache, each gated against the float64 reference', async () => {
  for (const seqLen of [1, 3]) {
    const shape: BenchShape = { batchSize: 2, seqLen, embedDim: 32, numHeads: 2, isCausal: true, cacheLen: 37 };
    const result = await runBenchmark(shape, [engineSystem, peer, wasmSystem, cpuSystem], { warmup: 1, runs: 3 });
    expect(result.systems.map((s) => [s.id, s.status, s.error])).toEqual([
      ['engine', 'ok', undefined],
      ['wasm', 'ok', undefined],
      ['cpu', 'ok', undefined],
    ]);
    for (const s of result.systems) expect(s.maxAbsError).toBeLessThan(1e-5);
    expect(result.notRun).toEqual([{ id: 'peer', label: 'a peer', reason: expect.stringContaining('no KV cache') }]);
    expect(result.flops).toBe(attentionFlops(2, seqLen, 32, true, 37));
  }
});

test('the gate fails a system whose decode step is wrong', async () => {
  const shape: BenchShape = { batchSize: 1, seqLen: 1, embedDim: 16, numHeads: 2, isCausal: true, cacheLen: 9 };
  // Attends without the cache: the output of a one-token sequence, not of the step.
  const noCache: BenchSystem = {
    id: 'no-cache',
    label: 'forgets the cache',
    kvCache: true,
    async prepare({ stateDict }) {
      const engine = await createAttentionEngine({ backend: 'cpu' });
      const layer = engine.createMultiHeadAttention({ embedDim: 16, numHeads: 2 }, stateDict);
      return { run: async (q) => (await layer.forward(q, { batchSize: 1, seqLen: 1 })).output, dispose: () => engine.dispose() };
    },
  };
  const result = await runBenchmark(shape, [noCache], { warmup: 0, runs: 1 });
  expect(result.systems[0].status).toBe('failed');
  expect(result.systems[0].error).toMatch(/^wrong output/);
});

test('a system steps on a cache that is made again from the past before it runs out', async () => {
  const shape: BenchShape = { batchSize: 1, seqLen: 2, embedDim: 16, numHeads: 2, isCausal: true, cacheLen: 5 };
  const { stateDict, query, past } = benchInputs(shape, 3);
  expect(past!.key.length).toBe(1 * 2 * 5 * 8); // [B, H, cacheLen, Dh]
  const engine = await createAttentionEngine({ backend: 'cpu' });
  const layer = engine.createMultiHeadAttention({ embedDim: 16, numHeads: 2 }, stateDict);
  const run = layerRun(layer, { shape, past });
  const outputs: Float32Array[] = [];
  for (let i = 0; i < 66; i++) outputs.push(await run.run(query));
  run.dispose();
  engine.dispose();
  // Run 2 sees the first run's tokens too; run 65 steps on a new cache holding the past only, as run 1 did.
  expect(outputs[1]).not.toEqual(outputs[0]);
  expect(outputs[64]).toEqual(outputs[0]);
  expect(outputs[65]).toEqual(outputs[1]);
});

test('FLOPs of a step count the keys each new row sees; without a cache the formula is unchanged', () => {
  const E = 512;
  expect(attentionFlopTerms(1, 1, E, true, 1024)).toEqual({ projections: 8 * E * E, attention: 4 * 1025 * E });
  // Causal rows over a cache of 5: 6, 7 and 8 keys; without causal all 8.
  expect(attentionFlopTerms(2, 3, E, true, 5).attention).toBe(4 * 2 * (6 + 7 + 8) * E);
  expect(attentionFlopTerms(2, 3, E, false, 5).attention).toBe(4 * 2 * 3 * 8 * E);
  expect(attentionFlops(1, 512, E, true)).toBe(8 * 512 * E * E + 2 * 512 * 512 * E);
  const decode = PRESETS.filter((p) => p.cacheLen);
  expect(decode.map((p) => [p.id, p.seqLen, p.cacheLen])).toEqual([
    ['decode-1024', 1, 1024],
    ['decode-4096', 1, 4096],
  ]);
});
