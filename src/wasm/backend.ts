// The 'wasm' backend: float32 on the CPU with WebAssembly SIMD kernels (wasm/*.ts, AssemblyScript),
// for users without a usable GPU; on threads too (threads.ts: Node, and cross-origin isolated pages).
// The attention of layers with a scoreMod (a JavaScript function per score) and linear attention runs
// on the float64 reference instead (their projections on the kernels); so does
// scaledDotProductAttention with a scoreMod, and linearAttention.

import type { Backend, BackendLayer, ThreadCapability } from '../backend.ts';
import { CpuBackend, refuseGpuBuffers } from '../cpu/backend.ts';
import { transformHeads } from '../cpu/head-transform.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import { headSplit, runAttention } from './attention.ts';
import { compileKernels, resolveWasmSimd, WasmKernels, type WasmSimd } from './kernels.ts';
import { coveredByKernels, WasmLayer } from './layer.ts';
import { resolveThreads } from './thread-support.ts';
import type { ThreadPool } from './threads.ts';

const GIVEN = "an engine on the 'wasm' backend";

export class WasmBackend implements Backend {
  readonly kind = 'wasm' as const;
  readonly precision = 'f32' as const;
  readonly precisionNote: string | null;
  /** The float64 reference, for what the kernels do not cover. */
  private readonly reference: CpuBackend;
  /** scaledDotProductAttention's instance, made on first use. */
  private attendKernels: WasmKernels | null = null;
  /** The scaledDotProductAttention call before this one (they share attendKernels' arena). */
  private lastAttend: Promise<unknown> = Promise.resolve();
  /** Threads the forwards run on (threads.ts), and why fewer than asked for, if so. */
  readonly threading: ThreadCapability;

  private constructor(
    /** compileKernels('shared') with a pool, else 'single', of build wasmSimd. */
    private readonly module: WebAssembly.Module,
    private readonly pool: ThreadPool | null,
    threadsNote: string | null,
    precision: 'f32' | 'f16',
    /** The build of the kernels that runs. */
    readonly wasmSimd: WasmSimd,
  ) {
    this.precisionNote = precision === 'f16' ? "precision 'f16' applies to WebGPU; the 'wasm' backend computes in float32" : null;
    this.reference = new CpuBackend();
    this.threading = { threads: pool ? pool.size : 1, note: threadsNote };
  }

  /**
   * Compiles the kernels and starts the threads (`threads`: the number, default the cores; threads.ts).
   * `simd`: the build (simd.ts resolveWasmSimd; 'auto' by default; the caller has refused a 'relaxed' the platform lacks).
   */
  static async create(options: { precision?: 'f32' | 'f16'; threads?: number; simd?: WasmSimd | 'auto' } = {}): Promise<WasmBackend> {
    const simd = resolveWasmSimd(options.simd) ?? 'simd128';
    const { pool, note } = await resolveThreads(options.threads);
    try {
      const module = await compileKernels(pool ? 'shared' : 'single', simd);
      return new WasmBackend(module, pool, note, options.precision ?? 'f32', simd);
    } catch (e) {
      pool?.dispose();
      throw e;
    }
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    // Packing copies the weights, as the other backends do: later changes to the caller's arrays do not leak in.
    return new WasmLayer(spec, weights, new WasmKernels(this.module, this.pool), (plan) => refuseGpuBuffers('MultiHeadAttention.forward', plan, GIVEN));
  }

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    refuseGpuBuffers('scaledDotProductAttention', plan, GIVEN);
    if (!coveredByKernels(plan.layer)) return this.reference.attend(plan);
    const run = this.lastAttend.then(() => this.attendNow(plan));
    this.lastAttend = run.catch(() => {});
    return run;
  }

  private async attendNow(plan: ForwardPlan): Promise<ForwardResult> {
    const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    this.attendKernels ??= new WasmKernels(this.module, this.pool);
    const kernels = this.attendKernels;
    kernels.release(0); // the previous call's buffers
    // With rotary: the queries and the last Sq keys turn by their positions (as the CPU backend).
    const q = Float32Array.from(plan.query);
    const k = Float32Array.from(plan.key);
    transformHeads(plan, q, 'query', H, Sq);
    transformHeads(plan, k, 'key', G, Sq, Skv, Skv - Sq);
    const qView = headSplit(kernels.put(q), Sq, H, Dh);
    const kView = headSplit(kernels.put(k), Skv, G, Dh);
    const vView = headSplit(kernels.put(plan.value), Skv, G, Dh);
    const o = headSplit(kernels.alloc(B * H * Sq * Dh), Sq, H, Dh);
    const probs = await runAttention(kernels, plan, qView, kView, vView, o);
    const output = kernels.take(o.ptr, B * H * Sq * Dh);
    return probs ? { output, attentionWeights: kernels.take(probs, B * H * Sq * Skv) } : { output };
  }

  dispose(): void {
    this.attendKernels = null;
    this.pool?.dispose();
  }
}
