// A KV-cache decode step at several cache lengths: the cost of one new token (B=1, seqLen 1) once the
// cache holds `length` positions. The projections are the same at every length; what grows is the
// attention over the cache (O(length)), and anything else that is. Median of `--runs` steps after 3
// warm-ups, on a cache started from `length` random positions (each step adds one). On the 'wasm'
// backend by default; `--backend webgpu` runs the WebGPU kernels of the adapter's built-in choice
// (tuning off: no sweep, nothing remembered), `--attention VARIANT` forces its attention kernel.
//
// `--dtypes f16,q8_0,q4_0` measures caches of those dtypes side by side (rounds alternate between them,
// one step each, so a noisy stretch of the machine touches all alike), with each one's time and memory
// (cache.bytes; on WebGPU also what engine.stats' bytes grew by when the cache was made)
// against the first dtype's. `--paged 8` measures instead 8 sequences with contexts 100, 200, … 800
// each adding one token: one call on a PagedKvCache against 8 calls on 8 plain caches, alternating,
// median of `--runs` after 2 warm-ups; with `--dtypes`, for each of those dtypes in turn (the pool and
// the plain caches of that dtype), on either backend. `--steady 500` adds the steady state: after those
// rounds, 500 more of each way, alternating, every cache truncated back to its context after each
// step (so the contexts stay 100 … 800) and the first 50 not counted, once JIT and caches have settled.
// `--kernels 300` (wasm, one thread, with --steady) then times each kernel call for that many more rounds
// of each way: a step's attention kernels, its projections and the rest (JavaScript, the kernels' calls),
// medians, and the most the paged call could gain while its kernels take what they take: the 8 calls'
// steady time over the paged call's kernels alone (the timing adds a little to each call's "rest").
//
//   node scripts/run-ts.mjs scripts/bench-wasm-decode.ts [--runs 30] [--threads 1] [--embed 512 --heads 8 --kv-heads 8]
//     [--lengths 128,4096] [--backend wasm|webgpu] [--attention rows64-keys32-r4] [--dtypes f16,q8_0,q4_0] [--paged 8 [--steady 500 [--kernels 300]]]

import { type AttentionVariant, createAttentionEngine, type KvCache, type KvCacheDtype } from '../src/index.ts';
import { callKernel, WasmKernels } from '../src/wasm/kernels.ts';
import type { KernelCall } from '../src/wasm/threads.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '30' },
  threads: { type: 'string', default: '1' },
  embed: { type: 'string', default: '512' },
  heads: { type: 'string', default: '8' },
  'kv-heads': { type: 'string' },
  lengths: { type: 'string', default: '128,4096' },
  backend: { type: 'string', default: 'wasm' },
  attention: { type: 'string' },
  dtypes: { type: 'string' },
  paged: { type: 'string' },
  steady: { type: 'string' },
  kernels: { type: 'string' },
});
const E = Number(values.embed);
const H = Number(values.heads);
const G = Number(values['kv-heads'] ?? values.heads);
const runs = Number(values.runs);
const lengths = values.lengths.split(',').map(Number);
if (values.backend !== 'wasm' && values.backend !== 'webgpu') throw new Error(`--backend must be wasm or webgpu; got ${values.backend}`);
const engine =
  values.backend === 'wasm'
    ? await createAttentionEngine({ backend: 'wasm', threads: Number(values.threads) })
    : await createAttentionEngine({
        backend: 'webgpu',
        // The built-in choice of the adapter (no sweep, nothing remembered from earlier runs), or the forced kernel.
        tuning: { mode: 'off', ...(values.attention ? { kernels: { flash_attention: values.attention as AttentionVariant } } : {}) },
      });
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
const Dh = E / H;
const x = uniform(E, 1, mulberry32(2));
const where = engine.backend === 'wasm' ? `${engine.threads} thread(s)` : `WebGPU, ${engine.adapterInfo?.description || engine.adapterInfo?.vendor}`;
const mib = (n: number) => `${(n / 2 ** 20).toFixed(2)} MiB`;
const step = (kvCache: KvCache) => mha.forward(x, { batchSize: 1, seqLen: 1, kvCache, isCausal: true });

if (values.paged) {
  const dtypes = values.dtypes ? (values.dtypes.split(',') as KvCacheDtype[]) : [null];
  for (const dtype of dtypes) await pagedRounds(Number(values.paged), dtype);
} else if (values.dtypes) await dtypeRounds(values.dtypes.split(',') as KvCacheDtype[]);
else await plainRuns();
mha.dispose();
engine.dispose();

/** The original measurement: one cache at a time, `runs` steps each. */
async function plainRuns(): Promise<void> {
  console.log(`decode step, E=${E} H=${H} G=${G}, ${where}, median of ${runs}`);
  for (const length of lengths) {
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: length + runs + 3, ...past(length) });
    const times: number[] = [];
    for (let i = 0; i < runs + 3; i++) {
      const t0 = performance.now();
      await step(cache);
      if (i === 2) await engine.settled(); // WebGPU: the final kernels from here on (tier 0 before)
      if (i >= 3) times.push(performance.now() - t0);
    }
    console.log(`  cache length ${length}: ${median(times).toFixed(3)} ms (best ${Math.min(...times).toFixed(3)} ms)`);
    cache.dispose();
  }
}

/** Caches of each dtype at each length, stepped in alternation: time and memory side by side. */
async function dtypeRounds(dtypes: KvCacheDtype[]): Promise<void> {
  console.log(`decode step by cache dtype, E=${E} H=${H} G=${G} (Dh ${Dh}), ${where}, median of ${runs} alternating rounds after 3`);
  for (const length of lengths) {
    const caches = dtypes.map((dtype) => {
      const before = engine.stats().bytes;
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: length + runs + 3, dtype, ...past(length) });
      return { dtype, cache, statsBytes: engine.stats().bytes - before }; // what engine.stats counts for it (WebGPU)
    });
    const times = dtypes.map(() => [] as number[]);
    for (let i = 0; i < runs + 3; i++) {
      for (const [k, c] of caches.entries()) {
        const t0 = performance.now();
        await step(c.cache);
        if (i === 2 && k === caches.length - 1) await engine.settled();
        if (i >= 3) times[k].push(performance.now() - t0);
      }
    }
    const base = { ms: median(times[0]), bytes: caches[0].cache.bytes };
    console.log(`  cache length ${length}:`);
    for (const [k, c] of caches.entries()) {
      const ms = median(times[k]);
      const stats = engine.backend === 'webgpu' ? `, engine.stats +${mib(c.statsBytes)}` : '';
      console.log(
        `    ${c.dtype.padEnd(5)} ${ms.toFixed(3)} ms (${(ms / base.ms).toFixed(2)}× ${dtypes[0]}), cache.bytes ${mib(c.cache.bytes)} (${(c.cache.bytes / base.bytes).toFixed(3)}×)${stats}`,
      );
    }
    for (const c of caches) c.cache.dispose();
  }
}

/** n sequences with contexts 100, 200, … each adding a token: one paged call against n calls on n plain caches (of `dtype`, or the backend's default). */
async function pagedRounds(n: number, dtype: KvCacheDtype | null): Promise<void> {
  const asked = dtype ? { dtype } : {};
  const contexts = Array.from({ length: n }, (_, i) => 100 * (i + 1));
  const steps = runs + 2;
  const steady = Number(values.steady ?? 0);
  const xs = uniform(n * E, 1, mulberry32(3));
  const plains = contexts.map((length) => mha.createKvCache({ batchSize: 1, maxSeqLen: length + steps + 1, ...asked, ...past(length) }));
  const blockSize = 16;
  const paged = mha.createPagedKvCache({ blockSize, maxBlocks: contexts.reduce((a, l) => a + Math.ceil((l + steps + 1) / blockSize), 0), ...asked });
  const ids = contexts.map(() => paged.addSequence());
  // Each sequence's context prefilled through the paged cache in one call (a mixed prefill).
  const ctx = new Float32Array(contexts.reduce((a, l) => a + l, 0) * E);
  for (let i = 0; i < ctx.length; i++) ctx[i] = Math.sin(i);
  await mha.forward(ctx, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: contexts[i] })) });
  const pagedTimes: number[] = [];
  const separateTimes: number[] = [];
  const pagedStep = async () => {
    const t0 = performance.now();
    await mha.forward(xs, { kvCache: paged, sequences: ids.map((id) => ({ id, length: 1 })) });
    return performance.now() - t0;
  };
  const separateSteps = async () => {
    const t0 = performance.now();
    for (const [k, cache] of plains.entries()) await mha.forward(xs.subarray(k * E, (k + 1) * E), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
    return performance.now() - t0;
  };
  for (let i = 0; i < steps; i++) {
    // Alternate which way goes first, so that neither always follows the other.
    const [a, b] = i % 2 ? [await separateSteps(), await pagedStep()] : [await pagedStep(), await separateSteps()];
    const [p, q] = i % 2 ? [b, a] : [a, b];
    if (i >= 2) {
      pagedTimes.push(p);
      separateTimes.push(q);
    }
    if (i === 1) await engine.settled();
  }
  const one = median(pagedTimes);
  const many = median(separateTimes);
  console.log(
    `${n} sequences (contexts ${contexts[0]} … ${contexts[n - 1]}) each adding a token, E=${E} H=${H} G=${G}, cache dtype ${paged.dtype}, ${where}, median of ${runs} alternating after 2`,
  );
  console.log(`  one paged call: ${one.toFixed(3)} ms; ${n} calls on ${n} caches: ${many.toFixed(3)} ms; ${(many / one).toFixed(2)}× faster`);
  if (steady > 0) {
    // Back to the contexts, then each step undone after it is timed: the same keys every time.
    const held = plains.map((c) => c.length);
    const back = () => {
      for (const [k, id] of ids.entries()) paged.truncate(id, held[k]);
      for (const [k, c] of plains.entries()) c.truncate(held[k]);
    };
    const [p, q]: number[][] = [[], []];
    for (let i = 0; i < steady + 50; i++) {
      const [a, b] = i % 2 ? [await separateSteps(), await pagedStep()] : [await pagedStep(), await separateSteps()];
      back();
      if (i >= 50) {
        p.push(i % 2 ? b : a);
        q.push(i % 2 ? a : b);
      }
    }
    const [s1, s2] = [median(p), median(q)];
    console.log(
      `  steady state (median of ${steady} alternating after 50, contexts held): one paged call ${s1.toFixed(3)} ms; ${n} calls ${s2.toFixed(3)} ms; ${(s2 / s1).toFixed(2)}× faster`,
    );
    const timed = Number(values.kernels ?? 0);
    if (timed > 0) await kernelRounds(timed, n, s2, pagedStep, separateSteps, back);
  }
  for (const cache of plains) cache.dispose();
  paged.dispose();
}

/** What a step's kernels took, by kind (ms): attention, projections. */
interface KernelTimes {
  attention: number;
  projections: number;
}

/**
 * `rounds` more of each way, alternating, with every kernel call timed (WasmKernels.run wrapped: one
 * thread, the calls in order, as run() makes them): each way's attention kernels, projections and the
 * rest, medians of the rounds.
 */
async function kernelRounds(
  rounds: number,
  n: number,
  separateMs: number,
  pagedStep: () => Promise<number>,
  separateSteps: () => Promise<number>,
  back: () => void,
): Promise<void> {
  if (engine.backend !== 'wasm' || engine.threads !== 1) {
    console.log('  --kernels: wasm on one thread only (the calls timed one by one on the caller)');
    return;
  }
  const proto = WasmKernels.prototype as unknown as { run: (lists: KernelCall[][], kind?: string) => Promise<void> };
  const run = proto.run;
  const now: KernelTimes = { attention: 0, projections: 0 };
  proto.run = async function (this: { k: Record<string, (...args: number[]) => void> }, lists: KernelCall[][]): Promise<void> {
    for (const calls of lists) {
      for (const c of calls) {
        const t0 = performance.now();
        callKernel(this.k, c);
        const t = performance.now() - t0;
        if (c[0].includes('gem'))
          now.projections += t; // gemm, qgemm, qgemv, qgemm8, qgemv8
        else now.attention += t; // attention and its rule, rotary, decoding a cache's rows
      }
    }
  };
  const rows = { paged: [] as number[][], plain: [] as number[][] };
  try {
    for (let i = 0; i < rounds + 20; i++) {
      for (const way of i % 2 ? (['plain', 'paged'] as const) : (['paged', 'plain'] as const)) {
        now.attention = now.projections = 0;
        const total = await (way === 'paged' ? pagedStep() : separateSteps());
        if (i >= 20) rows[way].push([total, now.attention, now.projections, total - now.attention - now.projections]);
      }
      back();
    }
  } finally {
    proto.run = run;
  }
  const col = (r: number[][], j: number) => median(r.map((row) => row[j])) * 1000;
  const line = (name: string, r: number[][]) =>
    `    ${name}: ${col(r, 0).toFixed(0)} µs = attention kernels ${col(r, 1).toFixed(0)} + projections ${col(r, 2).toFixed(0)} + the rest ${col(r, 3).toFixed(0)}`;
  console.log(`  each kernel timed (median of ${rounds} alternating after 20, contexts held):`);
  console.log(line('one paged call', rows.paged));
  console.log(line(`${n} calls`, rows.plain));
  const bound = (separateMs * 1000) / (col(rows.paged, 1) + col(rows.paged, 2));
  console.log(
    `    the ${n} calls' steady time (${(separateMs * 1000).toFixed(0)} µs, untimed) over the paged call's kernels alone: ${bound.toFixed(2)}× (the most one paged call could gain with its kernels as they are)`,
  );
}

/** A past of `length` random positions, [1, G, length, Dh]. */
function past(length: number): { key: Float32Array; value: Float32Array } {
  const r = mulberry32(length);
  return { key: uniform(G * length * Dh, 1, r), value: uniform(G * length * Dh, 1, r) };
}
