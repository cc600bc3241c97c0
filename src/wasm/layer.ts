// A layer on the 'wasm' backend: its own kernel instance, whose memory holds the packed weights for
// the layer's life and each forward's buffers above them. One forward:
//
//   pass 1  gemm ×3     X [T, E] · W_qᵀ, W_kᵀ, W_vᵀ + b  → Q [T, H·Dh], K, V [T', G·Dh]   (token-major)
//   pass 1½ (rotary, QK-norm: cpu/head-transform.ts's transformHead on each float32 head row)
//   pass 2  attention   per (sequence, head), online softmax over blocks of 64 keys → O [T, H·Dh]
//                       (scoreMod and linear layers: the float64 reference's pass, attention.ts)
//   pass 3  gemm        O [T, E] · W_Oᵀ + b_O → Y [T, E]
//
// With a KV cache, the new tokens' K and V go into the cache's arrays (kv-cache.ts), and the
// attention reads rows 0 … Skv − 1 of it, copied into the arena.

import type { BackendLayer } from '../backend.ts';
import { DisposedError } from '../errors.ts';
import { transformHead } from '../cpu/head-transform.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import { headSplit, referenceAttention, runAttention, tokenMajor } from './attention.ts';
import { packBias, packWeights, threadsFor, type WasmKernels } from './kernels.ts';
import { WasmKvCache } from './kv-cache.ts';
import type { KernelCall } from './threads.ts';

interface Projection {
  w: number; // packed W [N, K]
  bias: number; // [⌈N/8⌉·8]
  N: number;
  K: number;
}

export class WasmLayer implements BackendLayer {
  private readonly q: Projection;
  private readonly k: Projection;
  private readonly v: Projection;
  private readonly out: Projection;
  /** Where each forward's buffers start. */
  private readonly base: number;

  constructor(
    private readonly spec: LayerSpec,
    weights: LayerWeights,
    private kernels: WasmKernels | null,
    private readonly refuse: (plan: ForwardPlan) => void,
  ) {
    const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = spec;
    const bias = weights.inProjBias; // q, then k, then v
    const project = (W: Float32Array, N: number, K: number, b: Float32Array | null, offset: number): Projection => ({
      w: kernels!.put(packWeights(W, N, K)),
      bias: kernels!.put(packBias(b, offset, N)),
      N,
      K,
    });
    this.q = project(weights.qProjWeight, H * Dh, E, bias, 0);
    this.k = project(weights.kProjWeight, G * Dh, kdim, bias, H * Dh);
    this.v = project(weights.vProjWeight, G * Dh, vdim, bias, (H + G) * Dh);
    this.out = project(weights.outProjWeight, E, E, weights.outProjBias, 0);
    this.base = kernels!.mark();
  }

  createCacheStorage(batchSize: number, maxSeqLen: number): WasmKvCache {
    return new WasmKvCache(batchSize, this.spec.numKvHeads, maxSeqLen, this.spec.headDim);
  }

  /** The forward before this one: a layer's calls run one at a time (they share its arena). */
  private last: Promise<unknown> = Promise.resolve();

  async forward(plan: ForwardPlan): Promise<ForwardResult> {
    this.refuse(plan);
    const run = this.last.then(() => this.run(plan));
    this.last = run.catch(() => {});
    return run;
  }

  private async run(plan: ForwardPlan): Promise<ForwardResult> {
    const kernels = this.kernels;
    if (!kernels) throw new DisposedError('MultiHeadAttention.forward: this layer', 'It was disposed while this call waited for the one before it.');
    kernels.release(this.base);
    const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E } = this.spec;
    const { batches, qRows, tokens } = plan.geometry;
    // With a cache the new tokens alone are projected: Sq keys and values per batch.
    const kvRows = plan.cache ? qRows : plan.geometry.kvRows;
    const x = kernels.put(plan.query);
    const crossInputs = plan.mode === 'cross';
    const [q, k, v] = await this.projectAll(kernels, [
      [x, tokens, this.q],
      [crossInputs ? kernels.put(plan.key) : x, batches * kvRows, this.k],
      [crossInputs ? kernels.put(plan.value) : x, batches * kvRows, this.v],
    ]);
    this.transformHeads(kernels, plan, q, tokens, H, 'query');
    this.transformHeads(kernels, plan, k, batches * kvRows, G, 'key');

    let kView = tokenMajor(k, kvRows, G, Dh);
    let vView = tokenMajor(v, kvRows, G, Dh);
    if (plan.cache) {
      const store = plan.cache.cache.storage as WasmKvCache;
      const { start } = plan.cache;
      store.append(kernels.f32, k >> 2, v >> 2, start, qRows);
      const Skv = plan.kvSeqLen;
      const cached = (from: Float32Array) => {
        const ptr = kernels.alloc(batches * G * Skv * Dh);
        store.rows(from, Skv, kernels.f32, ptr >> 2); // straight into kernel memory
        return headSplit(ptr, Skv, G, Dh);
      };
      kView = cached(store.k);
      vView = cached(store.v);
    }
    const o = kernels.alloc(tokens * H * Dh); // O [T, H·Dh] = concat(heads) [T, E]
    const [qView, oView] = [tokenMajor(q, qRows, H, Dh), tokenMajor(o, qRows, H, Dh)];
    let attentionWeights: Float32Array | null;
    if (coveredByKernels(this.spec)) {
      const probs = await runAttention(kernels, plan, qView, kView, vView, oView);
      attentionWeights = probs ? kernels.take(probs, plan.batchSize * H * plan.seqLen * plan.kvSeqLen) : null;
    } else {
      attentionWeights = referenceAttention(kernels, plan, qView, kView, vView, oView);
    }
    const [y] = await this.projectAll(kernels, [[o, tokens, this.out]]);
    const output = kernels.take(y, tokens * E);
    return attentionWeights ? { output, attentionWeights } : { output };
  }

  dispose(): void {
    this.kernels?.dispose(); // the instance and its memory go with the last reference
    this.kernels = null;
  }

  /**
   * y [rows, N] = x [rows, K] · Wᵀ + b for each (x, rows, W), split over the threads: by rows, or by
   * panels of 8 columns when there are few rows (decoding), so that each thread reads only its part
   * of W. Either way each y element is computed as one thread would. Returns the y addresses.
   */
  private async projectAll(kernels: WasmKernels, jobs: [x: number, rows: number, p: Projection][]): Promise<number[]> {
    const T = threadsFor(
      kernels,
      jobs.reduce((sum, [, rows, p]) => sum + rows * p.K * p.N, 0),
    );
    const lists: KernelCall[][] = Array.from({ length: T }, () => []);
    const ys = jobs.map(([x, rows, p]) => {
      const y = kernels.alloc(rows * p.N);
      if (rows >= 16 * T) {
        const chunk = Math.ceil(rows / T / 4) * 4; // whole micro-kernel steps of 4 rows
        for (let t = 0, r0 = 0; r0 < rows; t++, r0 += chunk) {
          lists[t].push(['gemm', x + 4 * r0 * p.K, p.K, Math.min(chunk, rows - r0), p.K, p.w, p.N, p.bias, y + 4 * r0 * p.N, p.N]);
        }
      } else {
        const panels = Math.ceil(Math.ceil(p.N / 8) / T);
        for (let t = 0, p0 = 0; p0 * 8 < p.N; t++, p0 += panels) {
          const n = Math.min(panels * 8, p.N - p0 * 8); // columns p0·8 … p0·8 + n − 1
          lists[t].push(['gemm', x, p.K, rows, p.K, p.w + 4 * p0 * 8 * p.K, n, p.bias + 4 * p0 * 8, y + 4 * p0 * 8, p.N]);
        }
      }
      return y;
    });
    await kernels.run(lists);
    return ys;
  }

  /** QK-norm and rotary (if the layer has them) of every head of `rows` token-major rows at `ptr`. */
  private transformHeads(kernels: WasmKernels, plan: ForwardPlan, ptr: number, rows: number, heads: number, kind: 'query' | 'key'): void {
    const { rotary, qkNorm, headDim: Dh } = this.spec;
    if (!rotary && !qkNorm) return;
    const f32 = kernels.f32;
    for (let m = 0; m < rows; m++) {
      const position = rotary ? plan.positions![m] : 0;
      for (let h = 0; h < heads; h++) transformHead(this.spec, f32, (ptr >> 2) + (m * heads + h) * Dh, kind, position);
    }
  }
}

/**
 * Whether the kernels run this layer's attention: softmax without a scoreMod (a JavaScript function
 * per score). Otherwise the projections still run on the kernels, and the attention pass on the
 * float64 reference (referenceAttention).
 */
export function coveredByKernels(spec: LayerSpec): boolean {
  return spec.attention === 'softmax' && !spec.scoreMod;
}
