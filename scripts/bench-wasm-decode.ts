// A KV-cache decode step at several cache lengths: the cost of one new token (B=1, seqLen 1) once the
// cache holds `length` positions. The projections are the same at every length; what grows is the
// attention over the cache (O(length)), and anything else that is. Median of `--runs` steps after 3
// warm-ups, on a cache started from `length` random positions (each step adds one). On the 'wasm'
// backend by default; `--backend webgpu` runs the WebGPU kernels of the adapter's built-in choice
// (tuning off: no sweep, nothing remembered), `--attention VARIANT` forces its attention kernel.
//
//   node scripts/run-ts.mjs scripts/bench-wasm-decode.ts [--runs 30] [--threads 1] [--embed 512 --heads 8] [--lengths 128,4096]
//     [--backend wasm|webgpu] [--attention rows64-keys32-r4]

import { type AttentionVariant, createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '30' },
  threads: { type: 'string', default: '1' },
  embed: { type: 'string', default: '512' },
  heads: { type: 'string', default: '8' },
  lengths: { type: 'string', default: '128,4096' },
  backend: { type: 'string', default: 'wasm' },
  attention: { type: 'string' },
});
const E = Number(values.embed);
const H = Number(values.heads);
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
const config = { embedDim: E, numHeads: H };
const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
const Dh = E / H;
const x = uniform(E, 1, mulberry32(2));
const where = engine.backend === 'wasm' ? `${engine.threads} thread(s)` : `WebGPU, ${engine.adapterInfo?.description || engine.adapterInfo?.vendor}`;
console.log(`decode step, E=${E} H=${H}, ${where}, median of ${runs}`);
for (const length of lengths) {
  const r = mulberry32(length);
  const past = { key: uniform(H * length * Dh, 1, r), value: uniform(H * length * Dh, 1, r) };
  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: length + runs + 3, ...past });
  const times: number[] = [];
  for (let i = 0; i < runs + 3; i++) {
    const t0 = performance.now();
    await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
    if (i === 2) await engine.settled(); // WebGPU: the final kernels from here on (tier 0 before)
    if (i >= 3) times.push(performance.now() - t0);
  }
  console.log(`  cache length ${length}: ${median(times).toFixed(3)} ms (best ${Math.min(...times).toFixed(3)} ms)`);
  cache.dispose();
}
mha.dispose();
engine.dispose();
