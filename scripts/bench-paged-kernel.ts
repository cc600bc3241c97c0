// The paged attention kernel against the plain cache's, apart from everything else (issue 40): for n
// sequences of `--keys` keys and G key/value heads, a decode step's 4 query heads of each key/value head
// through wasm/paged.ts's attendPaged (keys and values in a pool of 16-position blocks, the sequences'
// blocks interleaved as a batch of steps leaves them) and through wasm/attention.ts's attendHeads (each
// sequence's Kᵀ blocks and V rows, as a plain KvCache holds them), float32, one thread, the kernel
// exports called directly: no plan, projection or hand-off. Alternating, median of 1800 after 200.
//
//   node scripts/run-ts.mjs scripts/bench-paged-kernel.ts [--keys 450] [--sequences 8] [--head-dim 32]

import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  keys: { type: 'string', default: '450' },
  sequences: { type: 'string', default: '8' },
  'head-dim': { type: 'string', default: '32' },
});
const [S, nSeq, Dh] = [Number(values.keys), Number(values.sequences), Number(values['head-dim'])];
const [G, R, blockSize, shift] = [2, 4, 16, 4]; // key/value heads, query heads of each, positions a block

const kernels = new WasmKernels(await compileKernels('single'));
const k = kernels.k as unknown as Record<string, (...args: number[]) => void>;
const fill = (floats: number, seed: number) => {
  const at = kernels.alloc(floats);
  kernels.f32.set(uniform(floats, 1, mulberry32(seed)), at / 4);
  return at;
};
const q = fill(R * Dh, 1);
const o = kernels.alloc(R * Dh);
const scale = 1 / Math.sqrt(Dh);

// Plain: each sequence's Kᵀ [⌈S/64⌉, Dh, 64] and V [S, Dh] per key/value head; attend's scratch.
const plain = Array.from({ length: nSeq * G }, (_, i) => ({ kt: fill(Math.ceil(S / 64) * Dh * 64, 10 + i), v: fill(S * Dh, 1000 + i) }));
const scratch = kernels.alloc(32 * (64 + Dh + 3 + 5));

// Paged: K and V pools [G, blocks, blockSize, Dh] (src/wasm/paged-kv-cache.ts's layout); sequence s owns blocks s, s + n, s + 2n, …
const perSeq = Math.ceil(S / blockSize);
const rowBytes = 4 * Dh;
const blockStride = blockSize * rowBytes; // a head's rows of one block
const headBytes = perSeq * nSeq * blockStride; // a head's rows of all blocks
const [kPool, vPool] = [fill((G * headBytes) / 4, 3), fill((G * headBytes) / 4, 4)];
const tables = Array.from({ length: nSeq }, (_, s) => {
  const at = kernels.alloc(perSeq);
  new Int32Array(kernels.memory.buffer).set(
    Array.from({ length: perSeq }, (_, b) => b * nSeq + s),
    at / 4,
  );
  return at;
});
const pagedScratch = kernels.alloc(512 + 4 * (Dh + 3));

const runPlain = () => {
  for (let i = 0; i < nSeq * G; i++) {
    k.setRule(scale, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0);
    k.attendHeads(q, Dh, plain[i].kt, plain[i].v, Dh, o, Dh, R, S, Dh, scratch);
  }
};
const runPaged = () => {
  for (let s = 0; s < nSeq; s++) {
    for (let g = 0; g < G; g++) {
      k.setPagedRule(scale, 0, 0, 0, 0, 0, 0, 0, rowBytes);
      k.attendPaged(q, Dh, R, 1, kPool, vPool, tables[s], shift, blockStride, g * headBytes, o, Dh, S, Dh, pagedScratch);
    }
  }
};
const times: number[][] = [[], []];
for (let i = 0; i < 2000; i++) {
  const t0 = performance.now();
  (i % 2 ? runPaged : runPlain)();
  if (i >= 200) times[i % 2].push(performance.now() - t0);
}
const [a, b] = times.map(median);
console.log(
  `${nSeq} sequences × ${G} key/value heads × 4 query heads, ${S} keys, Dh ${Dh}: attendHeads (plain) ${(a * 1000).toFixed(1)} µs, attendPaged ${(b * 1000).toFixed(1)} µs: paged / plain ${(b / a).toFixed(2)}`,
);
