// A call on a PagedKvCache on the 'wasm' backend (WasmLayer.forwardPaged), ONE pass for all sequences:
//
//   pass 1  gemm ×3     X [T, E] · W_qᵀ, W_kᵀ, W_vᵀ + b → Q [T, H·Dh], K, V [T, G·Dh]   (all T rows at once)
//   pass 1½ QK-norm, rotary: each row at its own sequence's position (the sequence's plan.positions);
//           rotary alone in the kernels (rotary.ts)
//   append  each sequence's new K, V rows copied into its blocks, rounded to the pool's dtype (O(new
//           rows); paged-kv-cache.ts)
//   pass 2  attendPaged per (sequence, head), or per (sequence, key/value head) for a decode step's
//           query heads of one key/value head, reading K and V in place through the sequence's block
//           table (wasm/paged.ts; f16 and q-dtype rows decoded 64 keys at a time into each thread's
//           scratch), with its plan's score rule; the tasks spread over the threads
//   pass 3  gemm        O [T, H·Dh] · W_Oᵀ + b_O → Y [T, E]
//
// Every sequence's rows equal its run alone on a plain KvCache within float32 rounding: the same
// projections of its rows, the same rule, the keys summed in order with an online softmax.

import { normAcrossHeads, normValues, transformHead } from '../cpu/head-transform.ts';
import { type LayerSpec, type PagedPlan, rotaryAngles } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import type { WasmKernels } from './kernels.ts';
import { rotateInKernels } from './rotary.ts';
import { listsFor, sizeClass } from './thread-choice.ts';
import type { WasmPagedStorage } from './paged-kv-cache.ts';
import { type Projection, project } from './projection.ts';
import type { KernelCall } from './threads.ts';

/** A layer's projections, as WasmLayer holds them. */
export interface PagedProjections {
  q: Projection;
  k: Projection;
  v: Projection;
  out: Projection;
  gate: Projection | null;
}

/** Floats of attendPaged's scratch (wasm/paged.ts) for head size Dh: 4 query rows a pass over f32 rows; 32 and a tile of 64 decoded rows for a pool of f16 or a q-dtype (kind > 0). */
function scratchFloats(Dh: number, kind: number): number {
  const Dp = (Dh + 3) & ~3;
  return kind > 0 ? 2400 + 32 * Dp + 64 * Dh : 512 + 4 * Dp;
}

/** Multiply-adds of a paged call's attention below which it runs on one thread (see runPaged). */
const PAGED_MIN_WORK = 1 << 22;

/** Each of the call's T rows' position in its own sequence. */
function rowPositions(plan: PagedPlan, T: number): Int32Array {
  const positions = new Int32Array(T);
  for (const s of plan.sequences) positions.set(s.plan.positions!.subarray(0, s.length), s.row);
  return positions;
}

/** Runs `plan` on the layer's kernels; the pool must be placed and the arena free (WasmLayer's queue). */
export async function runPaged(kernels: WasmKernels, spec: LayerSpec, p: PagedProjections, plan: PagedPlan): Promise<ForwardResult> {
  kernels.release(0); // the previous call's buffers
  const store = plan.cache.storage as WasmPagedStorage;
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E } = spec;
  const T = plan.tokens;
  const x = kernels.put(plan.query);
  const [q, k, v] = await project(kernels, [
    [x, T, p.q],
    [x, T, p.k],
    [x, T, p.v],
  ]);

  // QK-norm and rotary, each row at its sequence's position; vNorm before V is cached.
  const inKernels =
    !!spec.rotary &&
    !spec.qkNorm &&
    rotateInKernels(kernels, spec, rowPositions(plan, T), [
      [q, H],
      [k, G],
    ]);
  if ((spec.rotary || spec.qkNorm) && !inKernels) {
    const f32 = kernels.f32;
    const angles = spec.rotary ? new Float64Array(spec.rotary.dim) : undefined;
    for (const s of plan.sequences) {
      for (let i = 0; i < s.length; i++) {
        const m = s.row + i;
        if (spec.rotary) rotaryAngles(spec.rotary, s.plan.positions![i], angles); // the token's, for its query and key heads
        for (const [ptr, heads, kind] of [
          [q, H, 'query'],
          [k, G, 'key'],
        ] as const) {
          const base = (ptr >> 2) + m * heads * Dh;
          normAcrossHeads(spec, f32, (h) => base + h * Dh, heads, kind); // qkNorm.over 'all' only
          for (let h = 0; h < heads; h++) transformHead(spec, f32, base + h * Dh, kind, angles);
        }
      }
    }
  }
  normValues(spec, kernels.f32, v >> 2, T * G * Dh);
  for (const s of plan.sequences) store.append(s.blocks, k + 4 * s.row * G * Dh, v + 4 * s.row * G * Dh, s.start, s.length);

  // Each sequence's block table and tree mask in the arena.
  const tables: number[] = [];
  const masks: number[] = [];
  for (const s of plan.sequences) {
    const table = kernels.alloc(s.blocks.length);
    kernels.i32.set(s.blocks, table >> 2);
    tables.push(table);
    masks.push(s.plan.masks.attnMask ? kernels.put(s.plan.masks.attnMask) : 0);
  }
  const o = kernels.alloc(T * H * Dh); // O [T, H·Dh]

  // Tasks, each a rule and an attendPaged call: a decode step of a sequence takes the query heads of one
  // key/value head together where their rule is the same (no per-head sinks or ALiBi slopes).
  const perKv = H / G;
  const costs: number[] = [];
  const calls: KernelCall[] = []; // rule, call, rule, call, …
  const { blockStride, headBytes, rowBytes, kind } = store;
  let work = 0;
  for (let n = 0; n < plan.sequences.length; n++) {
    const s = plan.sequences[n];
    const Skv = s.start + s.length;
    const { scale, softcap, sinks, alibiSlopes } = s.plan.score;
    const window = s.plan.masks.window;
    const keys = window > 0 ? Math.min(Skv, window + s.length) : Skv; // keys a head reads (a bound)
    work += H * s.length * keys * Dh;
    const grouped = s.length === 1 && perKv > 1 && !sinks && !alibiSlopes;
    const perHead = !!(sinks || alibiSlopes);
    let rule: KernelCall = ['setPagedRule', scale, softcap, 0, 0, 0, window, masks[n], kind, rowBytes];
    for (let h = 0; h < H; h += grouped ? perKv : 1) {
      if (perHead) rule = ['setPagedRule', scale, softcap, alibiSlopes ? alibiSlopes[h] : 0, sinks ? sinks[h] : 0, sinks ? 1 : 0, window, masks[n], kind, rowBytes];
      const g = Math.floor(h / perKv);
      const at = 4 * (s.row * H + h) * Dh;
      const rows = grouped ? perKv : s.length;
      const ld = grouped ? Dh : H * Dh;
      const head = g * headBytes; // where head g's rows start
      const { keys: kPool, values: vPool, shift } = store;
      calls.push(rule, ['attendPaged', q + at, ld, rows, grouped ? 1 : 0, kPool, vPool, tables[n], shift, blockStride, head, o + at, ld, Skv, Dh, 0]);
      costs.push(rows * keys);
    }
  }
  // Threads only for work well past a plain pass's bound: 8 one-token steps over 100 … 800 keys (E 256,
  // H 8, G 2: 0.9M multiply-adds) took 1.78 ms on 2 threads against 0.77 ms on one (2026-12-05, quiet):
  // the hand-off to the workers costs more than such a call's attention.
  const passKind = kernels.threads > 1 && work >= PAGED_MIN_WORK ? `paged:${costs.length}:${sizeClass(work)}:${kind}` : undefined; // ThreadChoice's
  const threads = passKind === undefined ? 1 : Math.min(listsFor(kernels, work, passKind), costs.length); // lists
  const lists: KernelCall[][] = Array.from({ length: threads }, () => []);
  const scratch = lists.map(() => kernels.alloc(scratchFloats(Dh, kind)));
  if (threads === 1) {
    // One list: the tasks in order, one scratch, a rule where it changes (a sequence's first task, or each head's).
    const list = lists[0];
    for (let i = 0; i < calls.length; i += 2) {
      if (i === 0 || calls[i] !== calls[i - 2]) list.push(calls[i]);
      calls[i + 1][15] = scratch[0];
      list.push(calls[i + 1]);
    }
  } else {
    // The costliest first, each to the least loaded thread.
    const load = new Float64Array(threads);
    const order = costs.map((_, i) => i).sort((a, b) => costs[b] - costs[a]);
    for (const i of order) {
      let t = 0;
      for (let u = 1; u < threads; u++) if (load[u] < load[t]) t = u;
      load[t] += costs[i];
      const call = calls[2 * i + 1];
      call[15] = scratch[t];
      lists[t].push(calls[2 * i], call);
    }
  }
  await kernels.run(lists, passKind);

  if (p.gate) {
    // config.outputGate: O ⊙ sigmoid(x·W_gᵀ + b_g) before the output projection.
    const [gp] = await project(kernels, [[x, T, p.gate]]);
    const f32 = kernels.f32;
    const [o0, g0] = [o >> 2, gp >> 2];
    for (let i = 0; i < T * H * Dh; i++) f32[o0 + i] *= 1 / (1 + Math.exp(-f32[g0 + i]));
  }
  const [y] = await project(kernels, [[o, T, p.out]]);
  return { output: kernels.take(y, T * E) };
}
