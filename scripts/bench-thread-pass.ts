// What handing a pass to the 'wasm' backend's worker costs on this machine (issue 41): first a bare
// Atomics.wait / Atomics.notify round trip (how long the caller spends in notify, and how long until a
// worker that waited in Atomics.wait, or spun, sees the store), then passes of 8 lists of float GEMM
// (`--rows` rows × 256 × 64 each) run through the kernels on one thread and on a pool of two, alternating,
// with `--gap` ms of the caller's own work before each (as a layer's other work comes between its passes):
// after more than src/wasm/worker.ts's SPIN_MS the worker has gone to sleep in Atomics.wait and must be
// woken. Medians of 3600 passes after 400; the pool's handoffs (taken, revoked: the caller ran every list).
//
//   node scripts/run-ts.mjs scripts/bench-thread-pass.ts [--rows 16] [--gap 0,0.3]

import { median } from '../src/util/stats.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { type KernelCall, ThreadPool } from '../src/wasm/threads.ts';
import { importNodeOnly } from '../src/node-only.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  rows: { type: 'string', default: '16' },
  gap: { type: 'string', default: '0,0.3' },
});
const spin = (ms: number) => {
  for (const until = performance.now() + ms; performance.now() < until; );
};
const us = (ms: number) => `${(ms * 1000).toFixed(1)} µs`;

// 1. The bare round trip: the caller stores and notifies; the worker, waiting (or spinning), stores back.
const { Worker } = (await importNodeOnly('node:worker_threads')) as typeof import('node:worker_threads');
for (const spins of [false, true]) {
  const flags = new Int32Array(new SharedArrayBuffer(8));
  const worker = new Worker(
    `const { workerData: flags } = require('node:worker_threads');
     for (;;) {
       const seen = Atomics.load(flags, 0);
       if (seen < 0) break;
       if (${spins}) for (const until = performance.now() + 5; Atomics.load(flags, 0) === seen && performance.now() < until; );
       Atomics.wait(flags, 0, seen, 50);
       const now = Atomics.load(flags, 0);
       if (now !== seen) Atomics.store(flags, 1, now);
     }`,
    { eval: true, workerData: flags },
  );
  await new Promise((r) => setTimeout(r, 200));
  const [notify, seen]: number[][] = [[], []];
  for (let i = 1; i <= 400; i++) {
    spin(0.5);
    const t0 = performance.now();
    Atomics.store(flags, 0, i);
    Atomics.notify(flags, 0);
    notify.push(performance.now() - t0);
    while (Atomics.load(flags, 1) !== i);
    seen.push(performance.now() - t0);
  }
  Atomics.store(flags, 0, -1);
  Atomics.notify(flags, 0);
  await worker.terminate();
  console.log(
    `a worker ${spins ? 'spinning' : 'waiting in Atomics.wait'}: notify takes the caller ${us(median(notify))}, the worker sees the store after ${us(median(seen))}`,
  );
}

// 2. Passes of 8 GEMM lists on one thread and on two.
const pool = await ThreadPool.create(2);
const kernels = new WasmKernels(await compileKernels('shared'), pool);
const [M, K, N] = [Number(values.rows), 256, 64];
const put = (floats: number, seed: number) => {
  const at = kernels.alloc(floats);
  kernels.f32.set(uniform(floats, 1, mulberry32(seed)), at / 4);
  return at;
};
const x = put(M * K, 1);
const w = put(8 * K * N, 2);
const bias = kernels.alloc(8 * N);
const y = kernels.alloc(M * 8 * N);
const lists: KernelCall[][] = Array.from({ length: 8 }, (_, c) => [['gemm', x, K, M, K, w + 4 * c * K * N, N, bias + 4 * c * N, y + 4 * c * N, 8 * N]]);
const one = [lists.flat()];
for (const gap of values.gap.split(',').map(Number)) {
  const before = { ...pool.handoffs };
  const times: number[][] = [[], []];
  for (let i = 0; i < 4000; i++) {
    spin(gap);
    const t0 = performance.now();
    await kernels.run(i % 2 ? lists : one);
    if (i >= 400) times[i % 2].push(performance.now() - t0);
  }
  const [a, b] = times.map(median);
  const taken = pool.handoffs.taken - before.taken;
  const revoked = pool.handoffs.revoked - before.revoked;
  console.log(
    `8 lists of ${M}×${K}·${K}×${N}, ${gap} ms between passes: 1 thread ${us(a)}, 2 threads ${us(b)}: ${(a / b).toFixed(2)}× (offers taken ${taken}, revoked ${revoked})`,
  );
}
pool.dispose();
