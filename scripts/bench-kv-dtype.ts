// A decode step over a KV cache of each dtype (issue 40's target: a q8_0 cache ≤ 1.1× the f16
// cache's step time, q4_0 ≤ 1.2×, on WebGPU): E 2048, H 16, G 4 (Dh 128), B 1, a cache holding
// `--length` positions (a past from random rows; each step's new row is truncated away again, so
// every step attends over length + 1 positions). WebGPU, tuning off (the adapter's built-in kernels),
// profiled: each step's wall time and its stages' GPU time (timestamp queries, where the adapter
// has them). The dtypes alternate step by step; `--warmup` rounds first (then settled()), then the
// median of `--runs` rounds.
//
//   node scripts/run-ts.mjs scripts/bench-kv-dtype.ts [--precision f32|f16] [--dtypes f16,q8_0,q4_0] [--length 4096] [--runs 9] [--warmup 2]

import { createAttentionEngine, type KvCacheDtype } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  precision: { type: 'string', default: 'f32' },
  dtypes: { type: 'string', default: 'f16,q8_0,q4_0' },
  length: { type: 'string', default: '4096' },
  runs: { type: 'string', default: '9' },
  warmup: { type: 'string', default: '2' },
});
const precision = values.precision as 'f32' | 'f16';
const dtypes = values.dtypes.split(',') as KvCacheDtype[];
const [length, runs, warmup] = [Number(values.length), Number(values.runs), Number(values.warmup)];
const engine = await createAttentionEngine({ backend: 'webgpu', precision, tuning: { mode: 'off' }, profile: true });
const config = { embedDim: 2048, numHeads: 16, numKvHeads: 4 };
const [G, Dh] = [4, 128];
const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
const x = uniform(config.embedDim, 1, mulberry32(2));
const r = mulberry32(3);
const past = { key: uniform(G * length * Dh, 1, r), value: uniform(G * length * Dh, 1, r) };
const caches = dtypes.map((dtype) => mha.createKvCache({ batchSize: 1, maxSeqLen: length + 1, dtype, ...past }));
const wall = dtypes.map(() => [] as number[]);
const gpu = dtypes.map(() => [] as number[]);
const attention = dtypes.map(() => [] as number[]);
for (let round = 0; round < warmup + runs; round++) {
  for (const [i, cache] of caches.entries()) {
    const t0 = performance.now();
    const { timings } = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
    const ms = performance.now() - t0;
    cache.truncate(length);
    if (round >= warmup) {
      wall[i].push(ms);
      if (timings) {
        gpu[i].push(timings.gpu);
        attention[i].push((timings.kv_store ?? 0) + timings.flash_attention);
      }
    }
  }
  if (round === warmup - 1) await engine.settled();
}
const where = `${engine.adapterInfo?.description || engine.adapterInfo?.vendor}, ${precision} engine`;
console.log(`decode step over ${length} positions, E 2048 H 16 G 4 B 1, ${where}, tuning off; median of ${runs} after ${warmup} warm-ups, dtypes alternating`);
const base = median(wall[0]);
for (const [i, dtype] of dtypes.entries()) {
  const bytes = caches[i].bytes;
  const a = attention[i].length
    ? ` | GPU ${median(gpu[i]).toFixed(2)} ms, attention (+store) ${median(attention[i]).toFixed(2)} ms (${(median(attention[i]) / median(attention[0])).toFixed(2)}×)`
    : '';
  console.log(
    `  ${dtype.padEnd(5)} ${(bytes / 2 ** 20).toFixed(2)} MiB (${(bytes / caches[0].bytes).toFixed(3)}×): step ${median(wall[i]).toFixed(2)} ms (${(median(wall[i]) / base).toFixed(2)}×)${a}`,
  );
}
for (const cache of caches) cache.dispose();
mha.dispose();
engine.dispose();
