// The engine made when no backend was asked for and the only adapter runs its shaders on the CPU
// (SwiftShader, lavapipe, a fallback adapter): both a WebGPU backend and the 'wasm' backend, every
// layer on both, and each call on the one chooser.ts has chosen for its shape class: 'wasm' at
// first (it needs no shader compile), WebGPU once measured clearly faster. What only WebGPU can do
// (GPU buffers in or out) always runs there; what the 'wasm' kernels do not cover (scoreMod, linear
// attention: the float64 path there) runs on WebGPU. A KV cache lives on the backend of its latest
// call and moves (read, then written into the other's storage) when its calls change backend.

import type { Backend, BackendLayer, GpuCapability, ThreadCapability } from '../backend.ts';
import type { KvCache, KvCacheStorage } from '../kv-cache.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult, KvCacheDtype, TuningReport, WarmupOptions } from '../types.ts';
import type { WasmBackend } from '../wasm/backend.ts';
import { coveredByKernels } from '../wasm/layer.ts';
import type { WebGPUBackend } from '../webgpu/backend.ts';
import { type AutoKind, BackendChooser, bucket, type Timer, type Trial } from './chooser.ts';

type Result = ForwardResult | BufferForwardResult;

export class AutoBackend implements Backend, GpuCapability {
  readonly chooser: BackendChooser;
  readonly precision = 'f32' as const;
  readonly precisionNote = null;
  readonly profiling = false;
  /** Each layer's spec → its AutoLayer (engine.tune() names layers by their spec). */
  private readonly layers = new WeakMap<LayerSpec, AutoLayer>();

  constructor(
    private readonly webgpu: WebGPUBackend,
    private readonly wasm: WasmBackend,
    why: string,
    timer?: Timer,
    rounds?: number,
  ) {
    this.chooser = new BackendChooser(
      why,
      () => webgpu.settled(),
      timer,
      rounds,
      () => webgpu.backgroundCompiles(),
    );
  }

  /** The backend of the latest call ('wasm' before any). */
  get kind(): AutoKind {
    return this.chooser.current;
  }
  /** Its GPU side: WebGPU's, with the backend choices in the tuning report. */
  get gpu(): GpuCapability {
    return this;
  }
  get threading(): ThreadCapability {
    return this.wasm.threading;
  }
  get wasmSimd(): 'relaxed' | 'simd128' {
    return this.wasm.wasmSimd;
  }
  get adapterInfo() {
    return this.webgpu.adapterInfo;
  }
  get device() {
    return this.webgpu.device;
  }

  tuningReport(): TuningReport {
    return { ...this.webgpu.tuningReport(), backends: this.chooser.report() };
  }

  async settled(): Promise<void> {
    await this.chooser.idle();
    await this.webgpu.settled();
  }

  warmup(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void> {
    return this.webgpu.warmup(plans, onProgress); // 'wasm' compiles nothing per shape
  }

  /** WebGPU's sweeps for these shapes, then the backend measurement of each (now, not in the background). */
  async tune(plans: readonly ForwardPlan[], onProgress?: WarmupOptions['onProgress']): Promise<void> {
    await this.webgpu.tune(plans, onProgress);
    for (const plan of plans) await this.layers.get(plan.layer)?.measure(plan);
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    const gpu = this.webgpu.createLayer(spec, weights);
    const wasm = coveredByKernels(spec) ? this.wasm.createLayer(spec, weights) : null;
    const layer = new AutoLayer(spec, gpu, wasm, this.chooser);
    this.layers.set(spec, layer);
    return layer;
  }

  attend(plan: ForwardPlan): Promise<Result> {
    if (!plan.layer.scoreMod && plan.layer.attention === 'softmax' && !needsGpu(plan)) {
      const backend = this.chooser.choose(classOf('sdpa', plan), () => {
        const copy = copyInputs(plan);
        return { run: (b) => this.attendOn(b, copy, false) };
      });
      return this.attendOn(backend, plan, true);
    }
    this.chooser.current = 'webgpu';
    return this.webgpu.attend(plan);
  }

  private attendOn(backend: AutoKind, plan: ForwardPlan, call: boolean): Promise<Result> {
    if (call) this.chooser.current = backend;
    return backend === 'wasm' ? this.wasm.attend(plan) : this.webgpu.attend(plan);
  }

  stats() {
    return this.webgpu.stats();
  }

  dispose(): void {
    this.webgpu.dispose();
    this.wasm.dispose();
  }
}

class AutoLayer implements BackendLayer {
  constructor(
    private readonly spec: LayerSpec,
    private readonly gpu: BackendLayer,
    /** Null for a layer the 'wasm' kernels do not cover: it runs on WebGPU. */
    private readonly wasm: BackendLayer | null,
    private readonly chooser: BackendChooser,
  ) {}

  forward(plan: ForwardPlan): Promise<Result> {
    const backend = needsGpu(plan) || !this.wasm ? 'webgpu' : this.chooser.choose(classOf(layerName(this.spec), plan), () => this.trial(plan));
    return this.run(backend, plan);
  }

  /** WebGPU's here is 'f32' (the auto engine's precision), as 'wasm''s. */
  get defaultCacheDtype(): KvCacheDtype {
    return this.gpu.defaultCacheDtype;
  }

  createCacheStorage(batchSize: number, maxSeqLen: number, dtype: KvCacheDtype): KvCacheStorage {
    if (!this.wasm) return this.gpu.createCacheStorage(batchSize, maxSeqLen, dtype);
    // Made on both now (the one not in use disposed at once): a dtype either refuses is refused here, not at a later move.
    this.layer(this.chooser.current === 'wasm' ? 'webgpu' : 'wasm')
      .createCacheStorage(1, 1, dtype)
      .dispose();
    return new AutoKvCacheStorage(this.chooser.current, { wasm: this.wasm, webgpu: this.gpu }, batchSize, maxSeqLen, dtype);
  }

  /** Measures this plan's class now (engine.tune()). */
  async measure(plan: ForwardPlan): Promise<void> {
    if (this.wasm) await this.chooser.measure(classOf(layerName(this.spec), plan), () => this.trial(withZeros(plan)));
  }

  dispose(): void {
    this.gpu.dispose();
    this.wasm?.dispose();
  }

  private async run(backend: AutoKind, plan: ForwardPlan): Promise<Result> {
    this.chooser.current = backend;
    const layer = this.layer(backend);
    if (!plan.cache || !this.wasm) return layer.forward(plan);
    const store = plan.cache.cache.storage as unknown as AutoKvCacheStorage;
    const storage = await store.on(backend, plan.cache.start);
    return layer.forward({ ...plan, cache: { cache: withStorage(plan.cache.cache, storage), start: plan.cache.start } });
  }

  private layer(backend: AutoKind): BackendLayer {
    return backend === 'wasm' && this.wasm ? this.wasm : this.gpu;
  }

  /**
   * One call of this plan's class on either backend, on copies of its inputs (and, with a KV cache,
   * on scratch caches of the same length, so the caller's cache is never touched).
   */
  private trial(plan: ForwardPlan): Trial {
    const copy = copyInputs(plan);
    const scratch = new Map<AutoKind, KvCacheStorage>();
    const run = async (backend: AutoKind) => {
      const layer = this.layer(backend);
      if (!copy.cache) return layer.forward(copy);
      const { cache, start } = copy.cache;
      let storage = scratch.get(backend);
      if (!storage) {
        storage = layer.createCacheStorage(cache.batchSize, plan.kvSeqLen, cache.dtype);
        const { numKvHeads: G, headDim: Dh } = this.spec;
        const rows = new Float32Array(cache.batchSize * G * start * Dh);
        storage.write(rows, rows, start);
        scratch.set(backend, storage);
      }
      return layer.forward({ ...copy, cache: { cache: withStorage(cache, storage), start } });
    };
    return {
      run,
      dispose: () => {
        for (const storage of scratch.values()) storage.dispose();
      },
    };
  }
}

/** A cache's storage on the backend of its latest call. */
class AutoKvCacheStorage implements KvCacheStorage {
  private inner: KvCacheStorage;

  constructor(
    private kind: AutoKind,
    private readonly layers: Record<AutoKind, BackendLayer | null>,
    private readonly batchSize: number,
    private readonly maxSeqLen: number,
    private readonly dtype: KvCacheDtype,
  ) {
    this.inner = layers[kind]!.createCacheStorage(batchSize, maxSeqLen, dtype);
  }

  get bytes(): number {
    return this.inner.bytes;
  }

  /** The storage on `backend`, rows 0 … length − 1 moved there first if they were on the other. */
  async on(backend: AutoKind, length: number): Promise<KvCacheStorage> {
    if (backend === this.kind) return this.inner;
    const next = this.layers[backend]!.createCacheStorage(this.batchSize, this.maxSeqLen, this.dtype);
    if (length > 0) {
      const { key, value } = await this.inner.readEncoded(length); // as stored: bit for bit
      next.writeEncoded(key, value, length);
    }
    this.inner.dispose();
    this.inner = next;
    this.kind = backend;
    return next;
  }

  read(length: number) {
    return this.inner.read(length);
  }
  write(key: Float32Array, value: Float32Array, length: number): void {
    this.inner.write(key, value, length);
  }
  readEncoded(length: number) {
    return this.inner.readEncoded(length);
  }
  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    this.inner.writeEncoded(key, value, length);
  }
  reset(): void {
    this.inner.reset();
  }
  moveRows(rows: readonly number[], to: number): void {
    this.inner.moveRows(rows, to);
  }
  discard(length: number, end: number): void {
    this.inner.discard(length, end);
  }
  dispose(): void {
    this.inner.dispose();
  }
}

/** GPU buffers in or out: WebGPU only. */
function needsGpu(plan: ForwardPlan): boolean {
  return plan.gpu !== null || plan.returnBuffer;
}

/** The cache as the backend layer sees it: everything the same, but its storage that backend's. */
function withStorage(cache: KvCache, storage: KvCacheStorage): KvCache {
  return Object.create(cache, { storage: { value: storage } }) as KvCache;
}

/**
 * A shape-only plan (engine.tune's: no data) with zero inputs of its sizes, so that a trial runs a
 * real call (the work does not depend on the values; WebGPU refuses bindings larger than their buffers).
 */
function withZeros(plan: ForwardPlan): ForwardPlan {
  if (plan.query.length > 0) return plan;
  const { embedDim: E, kdim, vdim } = plan.layer;
  const { batches, qRows, kvRows } = plan.geometry;
  const query = new Float32Array(batches * qRows * E); // [B, Sq, E]
  if (plan.mode !== 'cross') return { ...plan, query, key: query, value: query };
  return { ...plan, query, key: new Float32Array(batches * kvRows * kdim), value: new Float32Array(batches * kvRows * vdim) };
}

/** The plan with its own copies of the inputs (a trial runs later, when the caller may reuse its arrays). */
function copyInputs(plan: ForwardPlan): ForwardPlan {
  const query = plan.query.slice();
  const key = plan.key === plan.query ? query : plan.key.slice();
  const value = plan.value === plan.query ? query : plan.value === plan.key ? key : plan.value.slice();
  return { ...plan, query, key, value };
}

function layerName(spec: LayerSpec): string {
  return `layer E${spec.embedDim} H${spec.numHeads} G${spec.numKvHeads} Dh${spec.headDim} kdim${spec.kdim} vdim${spec.vdim}`;
}

/** The shape class: the layer's sizes and the call's, bucketed, and what changes the work. */
function classOf(what: string, plan: ForwardPlan): string {
  const flags = [plan.isCausal && 'causal', plan.needWeights && 'weights', plan.cache && 'cache', plan.mode === 'varlen' && 'varlen'].filter(Boolean);
  const sizes = what === 'sdpa' ? `sdpa H${plan.layer.numHeads} G${plan.layer.numKvHeads} Dh${plan.layer.headDim}` : what;
  return [sizes, `· B${bucket(plan.batchSize)} Sq${bucket(plan.seqLen)} Skv${bucket(plan.kvSeqLen)}`, ...flags].join(' ');
}
