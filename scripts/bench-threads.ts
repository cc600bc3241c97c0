// The 'wasm' backend's threads (issue 41): each shape on 1 thread and on `--threads` threads, in
// interleaved rounds (a block of calls of each engine a round, so that a slow stretch of the machine
// touches both alike: 1 prefill, or 20 decode steps one after another as a model decodes, whose first
// is not counted), median of `--runs` rounds' calls after warm-up rounds that take the engine past its
// first trials (src/wasm/thread-choice.ts ThreadChoice: 16 passes on the threads, 16 on one thread, ~3 passes a
// call), and the ratio 1 thread / N threads (above 1: the threads help): the steady state. Later trials
// (16 passes on the other side each 256 … 8192 passes) fall into the median like any slow call. `--beside N` runs N CPU-bound processes beside the engine for the whole measurement
// (a busy loop each, as another program on the machine): the threads must still not lose.
//
// Shapes (the issue's): a float prefill S512 E512 H8; a prefill of 512 and a decode step over a cache of
// 1024 at E 2048 H 16 G 4 with q4_0 weights (the decode with an f16 cache); `--shapes` picks some of
// prefill-f32, prefill-q4_0, decode-q4_0, decode-q4_0-q8, decode-f32; and decode-stack-q4_0-q8, a token
// stepped through 8 such layers (each its own weights and cache: as a model decodes, every layer's
// weights come from memory, not cache), the time per token.
//
//   node scripts/run-ts.mjs scripts/bench-threads.ts [--threads 2] [--runs 15] [--beside 0] [--shapes prefill-f32,prefill-q4_0,decode-q4_0]

import { type ChildProcess, spawn } from 'node:child_process';
import { type AttentionEngine, createAttentionEngine, type MultiHeadAttentionConfig, quantizeWeights } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  threads: { type: 'string', default: '2' },
  runs: { type: 'string', default: '15' },
  beside: { type: 'string', default: '0' },
  shapes: { type: 'string', default: 'prefill-f32,prefill-q4_0,decode-q4_0' },
});
const threads = Number(values.threads);
const runs = Number(values.runs);
const shapes = values.shapes.split(',');

interface Shape {
  name: string;
  /** Calls a round, one after another (the first not counted when more than one). */
  block: number;
  /** One call on `engine`'s layer (made once per engine). */
  make(engine: AttentionEngine): Promise<() => Promise<unknown>>;
}

const SHAPES: Record<string, Shape> = {
  'prefill-f32': prefill('prefill S512 E512 H8, float32 weights', { embedDim: 512, numHeads: 8 }, 512, false),
  'prefill-q4_0': prefill('prefill S512 E2048 H16 G4, q4_0 weights', { embedDim: 2048, numHeads: 16, numKvHeads: 4 }, 512, true),
  'decode-q4_0': decode('decode over 1024, E2048 H16 G4, q4_0 weights, f16 cache', true),
  'decode-q4_0-q8': decode("decode over 1024, E2048 H16 G4, q4_0 weights, activations 'q8', f16 cache", true, 'q8'),
  'decode-f32': decode('decode over 1024, E2048 H16 G4, float32 weights, f32 cache', false),
  'decode-stack-q4_0-q8': decode("a token through 8 layers: decode over 1024, E2048 H16 G4, q4_0 weights, activations 'q8', f16 cache", true, 'q8', 8),
};

function prefill(name: string, config: MultiHeadAttentionConfig, S: number, q4: boolean): Shape {
  const sd = randomStateDict(config, 1);
  const weights = q4 ? quantizeWeights(sd, { dtype: 'q4_0' }) : sd;
  const x = uniform(S * config.embedDim, 1, mulberry32(2));
  return {
    name,
    block: 1,
    async make(engine) {
      const mha = engine.createMultiHeadAttention(config, weights);
      return () => mha.forward(x, { batchSize: 1, seqLen: S, isCausal: true });
    },
  };
}

function decode(name: string, q4: boolean, activations: 'f32' | 'q8' = 'f32', layers = 1): Shape {
  const config = { embedDim: 2048, numHeads: 16, numKvHeads: 4, activations };
  const weights = Array.from({ length: layers }, (_, l) => {
    const sd = randomStateDict({ embedDim: 2048, numHeads: 16, numKvHeads: 4 }, 3 + l);
    return q4 ? quantizeWeights(sd, { dtype: 'q4_0' }) : sd;
  });
  const past = 1024;
  const Dh = 128;
  const key = uniform(4 * past * Dh, 1, mulberry32(4));
  const value = uniform(4 * past * Dh, 1, mulberry32(5));
  const x = uniform(2048, 1, mulberry32(6));
  return {
    name,
    block: layers > 1 ? 6 : 20,
    async make(engine) {
      const dtype = q4 ? 'f16' : 'f32';
      const stack = weights.map((w) => {
        const mha = engine.createMultiHeadAttention(config, w);
        return { mha, cache: mha.createKvCache({ batchSize: 1, maxSeqLen: past + 64, key, value, dtype }) };
      });
      return async () => {
        let h = x;
        for (const layer of stack) {
          if (layer.cache.length >= past + 64) {
            layer.cache.dispose();
            layer.cache = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: past + 64, key, value, dtype });
          }
          h = (await layer.mha.forward(h, { batchSize: 1, seqLen: 1, kvCache: layer.cache, isCausal: true })).output;
        }
        return h;
      };
    },
  };
}

/** N busy loops in child processes, for the whole run. */
function busyLoops(n: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
}

const beside = busyLoops(Number(values.beside));
try {
  const one = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  const many = await createAttentionEngine({ backend: 'wasm', threads });
  console.log(
    `'wasm' backend, 1 thread against ${many.threads} threads${many.threadsNote ? ` (${many.threadsNote})` : ''}, ${beside.length} busy process(es) beside, median over ${runs} interleaved rounds`,
  );
  for (const key of shapes) {
    const shape = SHAPES[key];
    if (!shape) throw new Error(`--shapes: unknown ${key}; known: ${Object.keys(SHAPES).join(', ')}`);
    const calls = [await shape.make(one), await shape.make(many)];
    const times: number[][] = [[], []];
    const warm = Math.ceil(40 / (3 * shape.block)) + 1; // rounds past the first trials (32 passes)
    for (let r = 0; r < runs + warm; r++) {
      for (const i of r % 2 ? [1, 0] : [0, 1]) {
        for (let c = 0; c < shape.block; c++) {
          const t0 = performance.now();
          await calls[i]();
          if (r >= warm && (c > 0 || shape.block === 1)) times[i].push(performance.now() - t0);
        }
      }
    }
    const [a, b] = times.map(median);
    console.log(`  ${shape.name}: 1 thread ${a.toFixed(2)} ms, ${many.threads} threads ${b.toFixed(2)} ms: ${(a / b).toFixed(2)}×`);
  }
  one.dispose();
  many.dispose();
} finally {
  for (const p of beside) p.kill();
}
