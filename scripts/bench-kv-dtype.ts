// A decode step over a KV cache of each dtype ('f32', 'f16', 'q8_0', 'q4_0'; issue 40's targets: q8_0
// ≤ 1.1× and q4_0 ≤ 1.2× the f16 cache's time), side by side: B 1, one new token over a cache of
// `--length` positions (a random past), E 2048, H 16, G 4 (Dh 128) by default. Each timed step appends a
// token, then truncate() takes the cache back to `--length`, so every step sees the same length. The dtypes
// alternate step by step (so drift hits all of them alike); median of `--runs` after `--warmup` warm-ups,
// for each thread count of `--threads` ('wasm'). Also prints each cache's bytes and its ratio to f16's.
// A dtype the backend refuses is reported as refused. With --kernel ('wasm'), the attention kernel alone
// as well: wasm/attention.ts's attendHeads for each key/value head's group over a cache of each dtype, one
// thread, the caches side by side in one kernel memory (what a dtype changes, without the projections).
//
//   node scripts/run-ts.mjs scripts/bench-kv-dtype.ts [--backend wasm|webgpu|cpu] [--threads 1,2] [--length 4096]
//     [--embed 2048 --heads 16 --kv-heads 4] [--runs 9 --warmup 2] [--dtypes f32,f16,q8_0,q4_0] [--kernel]

import { createAttentionEngine, type KvCache, type KvCacheDtype } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { WasmKvCache } from '../src/wasm/kv-cache.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  backend: { type: 'string', default: 'wasm' },
  threads: { type: 'string', default: '1,2' },
  length: { type: 'string', default: '4096' },
  embed: { type: 'string', default: '2048' },
  heads: { type: 'string', default: '16' },
  'kv-heads': { type: 'string', default: '4' },
  runs: { type: 'string', default: '9' },
  warmup: { type: 'string', default: '2' },
  dtypes: { type: 'string', default: 'f32,f16,q8_0,q4_0' },
  kernel: { type: 'boolean', default: false },
});
const backend = values.backend;
if (backend !== 'wasm' && backend !== 'webgpu' && backend !== 'cpu') throw new Error(`--backend must be wasm, webgpu or cpu; got ${backend}`);
const [E, H, G, L, runs, warmup] = [values.embed, values.heads, values['kv-heads'], values.length, values.runs, values.warmup].map(Number);
const dtypes = values.dtypes.split(',') as KvCacheDtype[];
const Dh = E / H;
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const stateDict = randomStateDict(config, 1);
const r = mulberry32(2);
const past = { key: uniform(G * L * Dh, 1, r), value: uniform(G * L * Dh, 1, r) };
const x = uniform(E, 1, r);

for (const threads of backend === 'wasm' ? values.threads.split(',').map(Number) : [1]) {
  const engine =
    backend === 'wasm'
      ? await createAttentionEngine({ backend: 'wasm', threads })
      : backend === 'webgpu'
        ? await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } })
        : await createAttentionEngine({ backend: 'cpu' });
  const mha = engine.createMultiHeadAttention(config, stateDict);
  const where =
    backend === 'wasm' ? `wasm, ${engine.threads} thread(s)` : backend === 'webgpu' ? `webgpu, ${engine.adapterInfo?.description || engine.adapterInfo?.vendor}` : 'cpu';
  console.log(
    `decode step over a cache of ${L} positions, E=${E} H=${H} G=${G} (Dh ${Dh}), B=1, ${where}: median of ${runs} after ${warmup} warm-ups, dtypes alternating`,
  );
  const caches = new Map<KvCacheDtype, KvCache>();
  for (const dtype of dtypes) {
    try {
      caches.set(dtype, mha.createKvCache({ batchSize: 1, maxSeqLen: L + 1, dtype, ...past }));
    } catch (e) {
      console.log(`  ${dtype.padEnd(5)} refused: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  const times = new Map<KvCacheDtype, number[]>([...caches.keys()].map((d) => [d, []]));
  for (let i = 0; i < warmup + runs; i++) {
    for (const [dtype, cache] of caches) {
      const t0 = performance.now();
      await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      const t = performance.now() - t0;
      cache.truncate(L);
      if (i === warmup - 1 && backend === 'webgpu') await engine.settled();
      if (i >= warmup) times.get(dtype)!.push(t);
    }
  }
  const f16Bytes = caches.get('f16')?.bytes;
  const f16Time = times.get('f16') ? median(times.get('f16')!) : undefined;
  for (const [dtype, cache] of caches) {
    const t = median(times.get(dtype)!);
    const vsTime = f16Time ? ` (${(t / f16Time).toFixed(2)}× f16's)` : '';
    const vsBytes = f16Bytes ? ` (${(cache.bytes / f16Bytes).toFixed(3)}× f16's)` : '';
    console.log(
      `  ${dtype.padEnd(5)} ${t.toFixed(3)} ms${vsTime}, best ${Math.min(...times.get(dtype)!).toFixed(3)} ms; cache ${(cache.bytes / 2 ** 20).toFixed(2)} MiB${vsBytes}`,
    );
    cache.dispose();
  }
  mha.dispose();
  engine.dispose();
}

if (values.kernel && backend === 'wasm') {
  // The attention pass alone: one query row of each of the H/G heads of every key/value head (a decode step's groups).
  const kernels = new WasmKernels(await compileKernels('single'));
  const caches = dtypes.map((dtype) => {
    const cache = new WasmKvCache(kernels, 1, G, L, Dh, dtype);
    cache.place();
    cache.write(past.key, past.value, L);
    return cache;
  });
  kernels.keep();
  const q = kernels.put(uniform(H * Dh, 1, r));
  const o = kernels.alloc(H * Dh);
  const scratch = kernels.alloc(32 * (64 + Dh + 8)); // attend's
  const dec = kernels.alloc(128 * Dh); // the decoded tile
  const kind = { f32: 0, f16: 1, q8_0: 2, q4_0: 3 };
  const times = caches.map(() => [] as number[]);
  const perKv = H / G;
  for (let i = 0; i < warmup + runs; i++) {
    caches.forEach((cache, c) => {
      const { k, v } = cache.views();
      const st = k.stored;
      const t0 = performance.now();
      for (let g = 0; g < G; g++) {
        kernels.k.setRule(1 / Math.sqrt(Dh), 0, 0, 0, 0, 1, 1, 0, 0, 0, kind[cache.dtype], st ? st.ks(0, g) : 0, st ? st.vRowBytes : 0, dec);
        const vAt = st ? st.v(0, g) : v.ptr + 4 * g * v.head;
        kernels.k.attendHeads(q + 4 * g * perKv * Dh, Dh, k.kt(0, g), vAt, Dh, o + 4 * g * perKv * Dh, Dh, perKv, L, Dh, scratch);
      }
      if (i >= warmup) times[c].push(performance.now() - t0);
    });
  }
  console.log(`the attention kernel alone (attendHeads, ${G} groups of ${perKv} heads over ${L} keys, Dh ${Dh}), 1 thread: median of ${runs} after ${warmup} warm-ups`);
  const f16 = dtypes.indexOf('f16');
  caches.forEach((cache, c) => {
    const t = median(times[c]);
    const vs = f16 >= 0 ? ` (${(t / median(times[f16])).toFixed(2)}× f16's)` : '';
    console.log(`  ${cache.dtype.padEnd(5)} ${t.toFixed(3)} ms${vs}, best ${Math.min(...times[c]).toFixed(3)} ms`);
  });
}
