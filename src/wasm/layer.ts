// A layer on the 'wasm' backend: its own kernel instance, whose memory holds the packed weights for
// the layer's life and each forward's buffers above them. One forward:
//
//   pass 1  gemm ×3     X [T, E] · W_qᵀ, W_kᵀ, W_vᵀ + b  → Q [T, H·Dh], K, V [T', G·Dh]   (token-major;
//                       quantized weights: qgemv for ≤ 8 rows, else qgemm, each weight as given: projection.ts)
//   pass 1½ (rotary, QK-norm: cpu/head-transform.ts's transformHead on each float32 head row; rotary alone
//           in the kernels, rotary.ts, the same numbers)
//   pass 2  attention   per (sequence, head), online softmax over blocks of 64 keys → O [T, H·Dh]
//                       (scoreMod and linear layers: the float64 reference's pass, attention.ts)
//   pass 3  gemm        O [T, H·Dh] · W_Oᵀ + b_O → Y [T, E]                       (or qgemv / qgemm)
//
// With a KV cache, the new tokens' K and V are copied into the cache's block, held in the same memory
// below the arena (kv-cache.ts; rounded to the cache's dtype: 'f32', 'f16', 'q8_0', 'q4_0'), and the
// attention reads rows 0 … Skv − 1 of it in place (q-dtypes, and f16 read by more than 4 heads a key/value
// head, decoded a block of 64 keys at a time; f16 read by 1 … 4 widened where the kernels read it).
// A call on a PagedKvCache runs the same passes once for all its sequences (paged-attention.ts), the
// pool held likewise (paged-kv-cache.ts; any of the four dtypes) and read in place through each
// sequence's block table.

import type { BackendLayer } from '../backend.ts';
import { DisposedError } from '../errors.ts';
import { normAcrossHeads, normValues, transformHead } from '../cpu/head-transform.ts';
import { type ForwardPlan, type LayerSpec, type LayerWeights, type PagedPlan, rotaryAngles } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import { type HeadView, referenceAttention, runAttention, type TransposedKeys, tokenMajor } from './attention.ts';
import type { WasmKernels } from './kernels.ts';
import { WasmKvCache } from './kv-cache.ts';
import type { KvCacheDtype } from '../types.ts';
import { createProjection, type Projection, project } from './projection.ts';
import { runPaged } from './paged-attention.ts';
import { rotateInKernels } from './rotary.ts';
import { WasmPagedStorage } from './paged-kv-cache.ts';

export class WasmLayer implements BackendLayer {
  private readonly q: Projection;
  private readonly k: Projection;
  private readonly v: Projection;
  private readonly out: Projection;
  /** config.outputGate's W_g [H·Dh, E] (+ b_g), or null. */
  private readonly gate: Projection | null;
  /** A forward is running: its buffers are in the arena, so a new cache waits to be placed. */
  private running = false;

  constructor(
    private readonly spec: LayerSpec,
    weights: LayerWeights,
    private kernels: WasmKernels | null,
    private readonly refuse: (plan: ForwardPlan) => void,
  ) {
    const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = spec;
    // Each weight as given: float32 panels, or quantized ones kept packed (projection.ts; never expanded to float).
    const bias = weights.inProjBias; // q, then k, then v
    // config.activations 'q8': the projections with quantized weights take their inputs as ggml's Q8_0 (wasm/q8.ts).
    const activations = spec.activations ?? 'f32';
    this.q = createProjection(kernels!, weights.qProjWeight, H * Dh, E, bias, 0, activations);
    this.k = createProjection(kernels!, weights.kProjWeight, G * Dh, kdim, bias, H * Dh, activations);
    this.v = createProjection(kernels!, weights.vProjWeight, G * Dh, vdim, bias, (H + G) * Dh, activations);
    this.out = createProjection(kernels!, weights.outProjWeight, E, H * Dh, weights.outProjBias, 0, activations);
    this.gate = weights.gateProjWeight ? createProjection(kernels!, weights.gateProjWeight, H * Dh, E, weights.gateProjBias ?? null, 0) : null;
    kernels!.keep();
  }

  readonly defaultCacheDtype = 'f32' as const;

  createCacheStorage(batchSize: number, maxSeqLen: number, dtype: KvCacheDtype): WasmKvCache {
    if (!this.kernels) throw new DisposedError('MultiHeadAttention.createKvCache: this layer', 'Create a new layer with engine.createMultiHeadAttention().');
    const storage = new WasmKvCache(this.kernels, batchSize, this.spec.numKvHeads, maxSeqLen, this.spec.headDim, dtype);
    if (!this.running) storage.place(); // else the next forward places it
    return storage;
  }

  /** A PagedKvCache's pool: K and V [G, maxBlocks, blockSize] rows of the dtype in this layer's memory (paged-kv-cache.ts). */
  createPagedStorage(blockSize: number, maxBlocks: number, dtype: KvCacheDtype): WasmPagedStorage {
    if (!this.kernels) throw new DisposedError('MultiHeadAttention.createPagedKvCache: this layer', 'Create a new layer with engine.createMultiHeadAttention().');
    const storage = new WasmPagedStorage(this.kernels, blockSize, maxBlocks, this.spec.numKvHeads, this.spec.headDim, dtype);
    if (!this.running) storage.place(); // else the next forward places it
    return storage;
  }

  /** A call on a PagedKvCache: all sequences in one pass (paged-attention.ts), queued behind the layer's other calls. */
  async forwardPaged(plan: PagedPlan): Promise<ForwardResult> {
    const run = this.last.then(async () => {
      const kernels = this.kernels;
      if (!kernels) throw new DisposedError('MultiHeadAttention.forward: this layer', 'It was disposed while this call waited for the one before it.');
      (plan.cache.storage as WasmPagedStorage).place(); // before the arena is in use
      this.running = true;
      try {
        return await runPaged(kernels, this.spec, { q: this.q, k: this.k, v: this.v, out: this.out, gate: this.gate }, plan);
      } finally {
        this.running = false;
      }
    });
    this.last = run.catch(() => {});
    return run;
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
    (plan.cache?.cache.storage as WasmKvCache | undefined)?.place(); // before the arena is in use
    this.running = true;
    try {
      return await this.runPlaced(kernels, plan);
    } finally {
      this.running = false;
    }
  }

  private async runPlaced(kernels: WasmKernels, plan: ForwardPlan): Promise<ForwardResult> {
    kernels.release(0); // the previous call's buffers
    const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E } = this.spec;
    const { batches, qRows, tokens } = plan.geometry;
    // With a cache the new tokens alone are projected: Sq keys and values per batch.
    const kvRows = plan.cache ? qRows : plan.geometry.kvRows;
    const x = kernels.put(plan.query);
    const crossInputs = plan.mode === 'cross';
    const [q, k, v] = await project(kernels, [
      [x, tokens, this.q],
      [crossInputs ? kernels.put(plan.key) : x, batches * kvRows, this.k],
      [crossInputs ? kernels.put(plan.value) : x, batches * kvRows, this.v],
    ]);
    // Rotary without QK-norm in the kernels, one token's angles for its query and key heads (rotary.ts);
    // else in JavaScript (cpu/head-transform.ts): the same numbers either way.
    const inKernels =
      !!plan.positions &&
      batches * kvRows === tokens &&
      rotateInKernels(kernels, this.spec, plan.positions.subarray(0, tokens), [
        [q, H],
        [k, G],
      ]);
    if (!inKernels) {
      this.transformHeads(kernels, plan, q, tokens, H, 'query');
      this.transformHeads(kernels, plan, k, batches * kvRows, G, 'key');
    }
    normValues(this.spec, kernels.f32, v >> 2, batches * kvRows * G * Dh); // config.vNorm, before V is cached

    let kView: HeadView | TransposedKeys = tokenMajor(k, kvRows, G, Dh);
    let vView = tokenMajor(v, kvRows, G, Dh);
    const kernelAttention = coveredByKernels(this.spec);
    if (plan.cache) {
      const store = plan.cache.cache.storage as WasmKvCache; // throws if it was disposed meanwhile
      store.append(k, v, plan.cache.start, qRows);
      ({ k: kView, v: vView } = store.views()); // rows 0 … Skv − 1 read where they are
      if (!kernelAttention) {
        // The reference reads float rows: the keys (and a cache of another dtype's values) decoded into the arena.
        kView = store.keyRows(plan.kvSeqLen);
        if (store.dtype !== 'f32') vView = store.valueRows(plan.kvSeqLen);
      }
    }
    const o = kernels.alloc(tokens * H * Dh); // O [T, H·Dh] = concat(heads)
    const [qView, oView] = [tokenMajor(q, qRows, H, Dh), tokenMajor(o, qRows, H, Dh)];
    let attentionWeights: Float32Array | null;
    if (kernelAttention) {
      const probs = await runAttention(kernels, plan, qView, kView, vView, oView);
      attentionWeights = probs ? kernels.take(probs, plan.batchSize * H * plan.seqLen * plan.kvSeqLen) : null;
    } else {
      attentionWeights = referenceAttention(kernels, plan, qView, kView as HeadView, vView, oView);
    }
    if (this.gate) {
      // config.outputGate: O ⊙ sigmoid(x·W_gᵀ + b_g), token-major [T, H·Dh], before the output projection.
      const [g] = await project(kernels, [[x, tokens, this.gate]]);
      const f32 = kernels.f32;
      const [o0, g0] = [o >> 2, g >> 2];
      for (let i = 0; i < tokens * H * Dh; i++) f32[o0 + i] *= 1 / (1 + Math.exp(-f32[g0 + i]));
    }
    const [y] = await project(kernels, [[o, tokens, this.out]]);
    const output = kernels.take(y, tokens * E);
    return attentionWeights ? { output, attentionWeights } : { output };
  }

  dispose(): void {
    this.kernels?.dispose(); // the instance and its memory go with the last reference
    this.kernels = null;
  }

  /** QK-norm and rotary (if the layer has them) of every head of `rows` token-major rows at `ptr`. */
  private transformHeads(kernels: WasmKernels, plan: ForwardPlan, ptr: number, rows: number, heads: number, kind: 'query' | 'key'): void {
    const { rotary, qkNorm, headDim: Dh } = this.spec;
    if (!rotary && !qkNorm) return;
    const f32 = kernels.f32;
    const angles = rotary ? new Float64Array(rotary.dim) : undefined;
    for (let m = 0; m < rows; m++) {
      if (rotary) rotaryAngles(rotary, plan.positions![m], angles); // the token's, for all its heads
      normAcrossHeads(this.spec, f32, (h) => (ptr >> 2) + (m * heads + h) * Dh, heads, kind); // qkNorm.over 'all' only
      for (let h = 0; h < heads; h++) transformHead(this.spec, f32, (ptr >> 2) + (m * heads + h) * Dh, kind, angles);
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
