// The 'wasm' backend's projections with packed weights on one thread: activations 'q8' (wasm/q8.ts:
// qgemv8, qgemm8, integer dot products) against 'f32' (wasm/qgemm.ts: qgemv, qgemm) on the same weights.
// Prefill: S rows (default 512) × K 2048 → N 2048 and 3072; decode: one row, the weights in cache
// (the same projection over and over). The kernels are called directly (no threads, no host), the two
// interleaved run by run; medians and minima of `--runs`, in ms and ns a weight (a row's weight: N·K·rows).
// Where the platform runs relaxed SIMD (src/wasm/kernels.ts relaxedSimdSupported; Node 20: run node with
// --experimental-wasm-relaxed-simd), 'q8r' is 'q8' in the relaxed build, interleaved too; 'q8rf' the same
// with the weights' scales and offsets in f32 where 'q8' keeps f16 scales alone (projection.ts halfScalesFit).
// Then decode streamed from memory: one row through `--layers` layers' projections (N 3072 and 2048, as a
// decode step's QKV and output), each layer's weights read once a pass, as a model steps through them.
//   node scripts/run-ts.mjs scripts/bench-q8.ts [--runs 9] [--rows 512] [--types q4_0,q8_0,q4_k,q6_k] [--layers 24]

import { GGUF_BLOCKS } from '../src/quant/pack.ts';
import type { QuantizedTensor } from '../src/quant/types.ts';
import { median } from '../src/util/stats.ts';
import { compileKernels, relaxedSimdSupported, WasmKernels } from '../src/wasm/kernels.ts';
import { createProjection, kernelBits, type Projection, scratchFloats } from '../src/wasm/projection.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '9' },
  rows: { type: 'string', default: '512' },
  types: { type: 'string', default: 'q4_0' },
  layers: { type: 'string', default: '24' },
});
const runs = Number(values.runs);
const S = Number(values.rows);
const types = String(values.types).split(',') as (keyof typeof GGUF_BLOCKS)[];
const K = 2048;
const layers = Number(values.layers);

/** Random blocks of a GGUF type with f16 scales that give weights of about ±1/√K. */
function randomTensor(dtype: keyof typeof GGUF_BLOCKS, N: number, seed: number): QuantizedTensor {
  const rng = mulberry32(seed);
  const { bytes, weights } = GGUF_BLOCKS[dtype];
  const data = Uint8Array.from({ length: ((N * K) / weights) * bytes }, () => Math.floor(rng() * 256));
  const half = (e: number) => ((e + 15) << 10) | Math.floor(rng() * 1024);
  for (let at = 0; at < data.length; at += bytes) {
    const h = dtype === 'q4_0' ? half(-9) : dtype === 'q8_0' ? half(-13) : dtype === 'q4_k' ? half(-14) : half(-14);
    const o = dtype === 'q6_k' ? 208 : 0;
    data[at + o] = h & 0xff;
    data[at + o + 1] = h >> 8;
    if (dtype === 'q4_k') {
      const m = half(-12);
      data[at + 2] = m & 0xff;
      data[at + 3] = m >> 8;
    }
  }
  return { dtype, shape: [N, K], data };
}

const kernels = new WasmKernels(await compileKernels('single', 'simd128'));
const relaxed = relaxedSimdSupported() ? new WasmKernels(await compileKernels('single', 'relaxed')) : null;
if (!relaxed) console.log('relaxed SIMD: not on this platform (Node 20: node --experimental-wasm-relaxed-simd), so no q8r');
type Name = 'f32' | 'q8' | 'q8r' | 'q8rf';
const NAMES: Name[] = relaxed ? ['f32', 'q8', 'q8r', 'q8rf'] : ['f32', 'q8'];
const instance = (name: Name) => (name.startsWith('q8r') ? relaxed! : kernels);
const xs = uniform(S * K, 1, mulberry32(1));
const x = kernels.put(xs);
if (relaxed && relaxed.put(xs) !== x) throw new Error('x at different addresses');
// Both instances get the same allocations in the same order below, so one address serves both.
function both<T>(f: (k: WasmKernels) => T): T {
  const a = f(kernels);
  if (relaxed) f(relaxed);
  return a;
}

function time(name: Name, p: Projection, rows: number, scratch: number, y: number): number {
  if (p.kind !== 'quantized') throw new Error('packed weights only');
  const k = instance(name).k as unknown as Record<string, (...args: number[]) => void>;
  const kernel = (rows <= 8 ? 'qgemv' : 'qgemm') + (p.activations === 'q8' ? '8' : '');
  const t0 = performance.now();
  k[kernel](x, K, rows, K, p.wq, p.so, p.N, p.bias, y, p.N, kernelBits(p), p.group, scratch);
  return performance.now() - t0;
}

console.log(`one thread, K ${K}; ${runs} runs interleaved; median (min) ms, ns a weight; ratios of the medians to f32`);
for (const dtype of types) {
  for (const N of [2048, 3072]) {
    const t = randomTensor(dtype, N, N);
    const f32 = both((k) => createProjection(k, t, N, K, null, 0, 'f32'));
    const q8 = both((k) => createProjection(k, t, N, K, null, 0, 'q8'));
    const q8f = both((k) => createProjection(k, t, N, K, null, 0, 'q8', false));
    const proj = { f32, q8, q8r: q8, q8rf: q8f };
    for (const rows of [S, 1]) {
      const mark = kernels.mark();
      const scratch = both((k) => k.alloc(Math.max(scratchFloats(f32, rows), scratchFloats(q8, rows), scratchFloats(q8f, rows))));
      const y = both((k) => k.alloc(rows * N));
      const times: Record<Name, number[]> = { f32: [], q8: [], q8r: [], q8rf: [] };
      const reps = rows === 1 ? 50 : 1; // decode: 50 calls a run
      for (let r = 0; r < runs + 1; r++) {
        for (const name of NAMES) {
          let ms = 0;
          for (let i = 0; i < reps; i++) ms += time(name, proj[name], rows, scratch, y);
          if (r > 0) times[name].push(ms / reps); // run 0 warms up
        }
      }
      const line = (name: Name) => {
        const m = median(times[name]);
        return `${name} ${m.toFixed(3)} (${Math.min(...times[name]).toFixed(3)}) ms ${((m * 1e6) / (N * K * rows)).toFixed(4)} ns`;
      };
      const ratios = NAMES.slice(1)
        .map((name) => `${name}/f32 ${(median(times[name]) / median(times.f32)).toFixed(2)}`)
        .join(' ');
      console.log(`${dtype} ${rows === 1 ? 'decode ' : `prefill ${rows}`} N ${N}: ${NAMES.map(line).join(' | ')} | ${ratios}`);
      both((k) => k.release(mark));
    }
  }
}

// Decode from memory: `layers` layers of (N 3072, N 2048) projections, one pass through all of them a run.
for (const dtype of types) {
  const mark = kernels.mark();
  const stack: Record<'f32' | 'q8' | 'q8f', Projection[]> = { f32: [], q8: [], q8f: [] };
  for (let l = 0; l < layers; l++) {
    for (const N of [3072, 2048]) {
      const t = randomTensor(dtype, N, N + l);
      stack.f32.push(both((k) => createProjection(k, t, N, K, null, 0, 'f32')));
      stack.q8.push(both((k) => createProjection(k, t, N, K, null, 0, 'q8')));
      stack.q8f.push(both((k) => createProjection(k, t, N, K, null, 0, 'q8', false)));
    }
  }
  const scratch = both((k) => k.alloc(Math.max(scratchFloats(stack.f32[0], 1), scratchFloats(stack.q8[0], 1))));
  const y = both((k) => k.alloc(3072));
  const times: Record<Name, number[]> = { f32: [], q8: [], q8r: [], q8rf: [] };
  for (let r = 0; r < runs + 1; r++) {
    for (const name of NAMES) {
      let ms = 0;
      for (const p of stack[name === 'f32' ? 'f32' : name === 'q8rf' ? 'q8f' : 'q8']) ms += time(name, p, 1, scratch, y);
      if (r > 0) times[name].push(ms / layers);
    }
  }
  const per = (name: Name) => `${name} ${median(times[name]).toFixed(3)} (${Math.min(...times[name]).toFixed(3)}) ms a layer`;
  const ratios = NAMES.slice(1)
    .map((name) => `${name}/f32 ${(median(times[name]) / median(times.f32)).toFixed(2)}`)
    .join(' ');
  console.log(`${dtype} decode from memory, ${layers} layers of N 3072 + 2048: ${NAMES.map(per).join(' | ')} | ${ratios}`);
  both((k) => k.release(mark));
}
kernels.dispose();
relaxed?.dispose();
