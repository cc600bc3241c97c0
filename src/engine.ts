// AttentionEngine: picks the backend, owns the device and its memory, makes layers.

import type { Backend } from './backend.ts';
import { CpuBackend } from './cpu/backend.ts';
import { DisposedError, InvalidArgumentError, WebGPUUnavailableError } from './errors.ts';
import { MultiHeadAttention, withOutputType } from './layer.ts';
import { type LayerSpec, resolveAttentionPlan, resolveLayerSpec, resolveLinearPlan, resolveShapeCalls, resolveWeights } from './plan/index.ts';
import type {
  AdapterInfo,
  BackendKind,
  BufferForwardResult,
  EngineOptions,
  EngineStats,
  ForwardResult,
  HalfForwardResult,
  MultiHeadAttentionConfig,
  LinearAttentionOptions,
  ScaledDotProductAttentionOptions,
  QuantizedStateDict,
  StateDict,
  TensorArray,
  TuningReport,
  WarmupOptions,
} from './types.ts';
import { AutoBackend } from './auto/backend.ts';
import { WasmBackend } from './wasm/backend.ts';
import { progressOption, resolveTuning, resolveWasmOptions } from './engine-options.ts';
import { ENGINE_KEYS, LIMIT_KEYS } from './option-keys.ts';
import { describe, knownKeys, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from './validate.ts';
import { WebGPUBackend } from './webgpu/backend.ts';
import { probeCompletion } from './webgpu/completion.ts';
import { type AcquiredDevice, acquireDevice, describeAdapter } from './webgpu/device.ts';
import { adapterKind } from './webgpu/variants.ts';

export type { AdapterInfo };

/** One call shape to prepare for: engine.warmup() and engine.tune(). */
export interface WarmupCall {
  /** A layer of this engine. */
  layer: MultiHeadAttention;
  /** Default 1. */
  batchSize?: number;
  seqLen: number;
  /** Keys per query: a KV cache's length after the call, or cross-attention's Skv. Default seqLen. */
  kvSeqLen?: number;
  /** Default false. */
  isCausal?: boolean;
}

/** WarmupCall's keys (its table lives beside the type: option-keys.ts cannot name the layer class without an import cycle). */
const WARMUP_CALL_KEYS = knownKeys<WarmupCall>({ layer: true, batchSize: true, seqLen: true, kvSeqLen: true, isCausal: true });

/** Owns a backend (a GPU device with its buffers and pipelines, or CPU kernels) and makes layers; made by createAttentionEngine(). */
export class AttentionEngine {
  /** The live layers, and their sizes. */
  private readonly layers = new Map<MultiHeadAttention, LayerSpec>();
  private impl: Backend | null;

  /** @internal Use createAttentionEngine(). */
  constructor(
    impl: Backend,
    /**
     * Why the engine runs other than plain WebGPU although no backend was asked for (no adapter: the
     * 'wasm' backend, or the float64 reference without WebAssembly SIMD); null otherwise.
     */
    readonly fallbackReason: string | null,
  ) {
    this.impl = impl;
  }

  /** The adapter behind the current device; null on the CPU backend. */
  get adapterInfo(): AdapterInfo | null {
    return this.live('adapterInfo').gpu?.adapterInfo ?? null;
  }

  /** Which backend runs the layers; on an engine that chooses (tuning.backends), the backend of the latest call. */
  get backend(): BackendKind {
    return this.live('backend').kind;
  }

  /**
   * Storage precision of weights, activations and KV caches on the GPU: 'f16' when asked for and
   * the adapter has shader-f16, else 'f32'. The CPU backend computes in float64 and reports 'f32'.
   */
  get precision(): 'f32' | 'f16' {
    return this.live('precision').precision;
  }

  /**
   * Threads the layers run on: on the 'wasm' backend options.threads or the cores, in Node and in
   * cross-origin isolated pages; 1 elsewhere.
   */
  get threads(): number {
    return this.live('threads').threading?.threads ?? 1;
  }

  /**
   * Why fewer threads run than were asked for, or than the cores, and what to do (e.g. a page that is
   * not cross-origin isolated, or where workers cannot start); null when not.
   */
  get threadsNote(): string | null {
    return this.live('threadsNote').threading?.note ?? null;
  }

  /**
   * Which build of the 'wasm' backend's kernels runs (options.wasmSimd): 'relaxed' (relaxed SIMD's 8-bit
   * dot product for 4-bit weights with `activations: 'q8'`, fused float multiply-adds) or 'simd128'; null
   * on an engine without them.
   */
  get wasmSimd(): 'relaxed' | 'simd128' | null {
    return this.live('wasmSimd').wasmSimd ?? null;
  }

  /** Whether forwards report `timings` (kernel times from timestamp queries). */
  get profiling(): boolean {
    return this.live('profiling').gpu?.profiling ?? false;
  }

  /** Why the precision asked for is not the one in use; null when it is. */
  get precisionNote(): string | null {
    return this.live('precisionNote').precisionNote;
  }

  /** The current GPU device (a new one after a recovered device loss), or null on the CPU backend. */
  get device(): GPUDevice | null {
    return this.live('device').gpu?.device ?? null;
  }

  /**
   * A multi-head attention layer with PyTorch nn.MultiheadAttention weights (state_dict names).
   * The weights are copied (uploaded once on WebGPU); later changes to the arrays do not affect the layer.
   * Projection weights may be quantized tensors (QuantizedStateDict: GGUF q4_0/q8_0/q4_k/q6_k blocks or
   * ONNX MatMulNBits), kept packed; the CPU backend dequantizes them exactly as ggml / ONNX Runtime do.
   */
  createMultiHeadAttention(config: MultiHeadAttentionConfig, stateDict: StateDict | QuantizedStateDict): MultiHeadAttention {
    const impl = this.live('createMultiHeadAttention');
    const spec = resolveLayerSpec(config);
    const weights = resolveWeights(spec, stateDict);
    const layer = new MultiHeadAttention(spec, impl.createLayer(spec, weights), (l) => this.layers.delete(l));
    this.layers.set(layer, spec);
    return layer;
  }

  /**
   * The attention kernel alone, on tensors the caller already projected (after a rotary embedding,
   * say), as PyTorch's F.scaled_dot_product_attention: query [B, H, Sq, Dh], key and value
   * [B, G, Skv, Dh] → `{ output }` [B, H, Sq, Dh] (and `attentionWeights` [B, H, Sq, Skv] with needWeights).
   */
  scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions & { outputType: 'f16'; returnBuffer?: false },
  ): Promise<HalfForwardResult>;
  scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions & { returnBuffer: true; needWeights: true },
  ): Promise<BufferForwardResult & { attentionWeightsBuffer: GPUBuffer }>;
  scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions & { returnBuffer: true },
  ): Promise<BufferForwardResult>;
  scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions & { needWeights: true; returnBuffer?: false },
  ): Promise<ForwardResult & { attentionWeights: Float32Array }>;
  scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions,
  ): Promise<ForwardResult>;
  async scaledDotProductAttention(
    query: TensorArray | GPUBuffer,
    key: TensorArray | GPUBuffer,
    value: TensorArray | GPUBuffer,
    options: ScaledDotProductAttentionOptions,
  ): Promise<ForwardResult | HalfForwardResult | BufferForwardResult> {
    const impl = this.live('scaledDotProductAttention');
    return withOutputType(await impl.attend(resolveAttentionPlan(query, key, value, options)), options);
  }

  /**
   * Linear attention (Katharopoulos et al. 2020) on projected tensors, query [B, H, Sq, Dh], key and
   * value [B, G, Skv, Dh] → `{ output }` [B, H, Sq, Dh], with φ(x) = elu(x) + 1:
   * out_i = φ(q_i)·Σ_j φ(k_j)ᵀ v_j / (φ(q_i)·Σ_j φ(k_j) + eps), eps default 1e-6, no 1/√Dh scaling.
   * Causal: j ≤ i' = i + Skv − Sq. Padded keys (keyPaddingMask) leave both sums. O(S·Dh²) work,
   * never an S×S matrix (so no needWeights). A whole layer: config.attention = 'linear'.
   */
  async linearAttention(query: Float32Array, key: Float32Array, value: Float32Array, options: LinearAttentionOptions): Promise<ForwardResult> {
    const impl = this.live('linearAttention');
    return (await impl.attend(resolveLinearPlan(query, key, value, options))) as ForwardResult;
  }

  /**
   * How this engine chooses its kernel variants and what it has chosen so far (per kernel and shape
   * class: the variant, each variant's time, any the correctness gate refused). Null on the CPU backend.
   */
  get tuning(): TuningReport | null {
    return this.live('tuning').gpu?.tuningReport() ?? null;
  }

  /**
   * Resolves when the work this engine's calls so far have caused or scheduled has finished: their
   * final kernels compiled in the background, and the sweeps of shape classes met for the first
   * time. Afterwards calls of those shapes run their final kernels and start nothing new. Benchmarks
   * and tests measure the steady state after it. Resolves at once on the CPU backend.
   */
  settled(): Promise<void> {
    return this.live('settled').gpu?.settled() ?? Promise.resolve();
  }

  /**
   * Compiles, now, the kernels that calls of these shapes will run, so that none of them waits for a
   * compiler (an app can pay at load time, behind a progress bar: `onProgress` is called after each
   * kernel). Without `calls`: every live layer of this engine at batchSize 1, seqLen 128.
   */
  async warmup(calls?: WarmupCall[], options: WarmupOptions = {}): Promise<void> {
    const impl = this.live('warmup');
    const where = 'AttentionEngine.warmup';
    const onProgress = progressOption(where, options);
    const list = calls ?? [...this.layers.keys()].map((layer) => ({ layer, seqLen: 128 }));
    const plans = resolveShapeCalls(where, list, WARMUP_CALL_KEYS, (l) => this.layers.get(l as MultiHeadAttention)); // checked on every backend
    await impl.gpu?.warmup(plans, onProgress); // nothing compiles per shape without a GPU
  }

  /**
   * Measures, now, which kernel variants are fastest for calls of these shapes (the sweeps that such
   * calls would otherwise start in the background), remembers the choices, and resolves with
   * `engine.tuning`. For apps that prefer to pay at load time. Null on the CPU backend.
   */
  async tune(calls: WarmupCall[], options: WarmupOptions = {}): Promise<TuningReport | null> {
    const impl = this.live('tune');
    const where = 'AttentionEngine.tune';
    const onProgress = progressOption(where, options);
    const plans = resolveShapeCalls(where, calls, WARMUP_CALL_KEYS, (l) => this.layers.get(l as MultiHeadAttention)); // checked on every backend
    if (!impl.gpu) return null;
    await impl.gpu.tune(plans, onProgress);
    return impl.gpu.tuningReport();
  }

  /** GPU buffers and bytes the engine holds, weights included; zero on the CPU backend. */
  stats(): EngineStats {
    return this.live('stats').gpu?.stats() ?? { buffers: 0, bytes: 0, peakBytes: 0 };
  }

  /** Releases every layer and all GPU memory at once; destroys the device if the engine created it. */
  dispose(): void {
    if (!this.impl) return;
    for (const layer of [...this.layers.keys()]) layer.dispose();
    this.impl.dispose();
    this.impl = null;
  }

  private live(what: string): Backend {
    if (!this.impl) throw new DisposedError(`AttentionEngine.${what}: this engine`, 'Create a new one with createAttentionEngine().');
    return this.impl;
  }
}

/**
 * Creates an engine. With no backend asked for: WebGPU on a GPU (browser navigator.gpu, or the
 * `webgpu` package in Node); on a software adapter (SwiftShader, lavapipe, a fallback adapter) both
 * WebGPU and 'wasm', each call shape on whichever is measured faster (engine.backend, and
 * engine.tuning.backends say which and why); without an adapter the 'wasm' backend
 * (engine.fallbackReason says why), or the float64 reference where WebAssembly SIMD is missing.
 * An explicit backend is always obeyed; so is an option only WebGPU honours (device, limits,
 * tuning, profile, precision 'f16').
 */
export async function createAttentionEngine(options: EngineOptions = {}): Promise<AttentionEngine> {
  const where = 'createAttentionEngine';
  const o = requireObject(where, 'options', options);
  rejectUnknownKeys(where, 'options', o, ENGINE_KEYS);
  const { backend, device } = options;
  const precision = options.precision ?? 'f32';
  const profile = options.profile === undefined ? false : requireBoolean(where, 'options.profile', options.profile);
  if (precision !== 'f32' && precision !== 'f16') {
    throw new InvalidArgumentError({ where, argument: 'options.precision', expected: '"f32", "f16" or left out', given: describe(precision) });
  }
  let limits: Record<string, number> = {};
  if (options.limits !== undefined) {
    limits = requireObject(where, 'options.limits', options.limits) as Record<string, number>;
    rejectUnknownKeys(where, 'options.limits', limits, LIMIT_KEYS);
    for (const [name, value] of Object.entries(limits)) requirePositiveInteger(where, `options.limits.${name}`, value);
    if (backend === 'cpu' || backend === 'wasm') {
      throw new InvalidArgumentError({ where, argument: 'options.limits', expected: `left out with backend: '${backend}'`, given: describe(options.limits) });
    }
  }
  const tuning = resolveTuning(where, options.tuning);
  const wasmSimd = resolveWasmOptions(where, options, backend);
  if (options.tuning !== undefined && (backend === 'cpu' || backend === 'wasm')) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.tuning',
      expected: `left out with backend: '${backend}' (it chooses WebGPU kernels)`,
      given: describe(options.tuning),
    });
  }
  if (backend !== undefined && backend !== 'webgpu' && backend !== 'wasm' && backend !== 'cpu') {
    throw new InvalidArgumentError({ where, argument: 'options.backend', expected: '"webgpu", "cpu", "wasm" or left out', given: describe(backend) });
  }
  if (device !== undefined) {
    if (typeof device !== 'object' || device === null || typeof (device as GPUDevice).createBuffer !== 'function') {
      throw new InvalidArgumentError({ where, argument: 'options.device', expected: 'a GPUDevice', given: describe(device) });
    }
    if (backend === 'cpu' || backend === 'wasm') {
      throw new InvalidArgumentError({
        where,
        argument: 'options.device',
        expected: `left out with backend: '${backend}'`,
        given: 'a GPUDevice',
        fix: "Pass backend: 'webgpu' (or leave it out) to run on this device.",
      });
    }
    await probeCompletion(device); // before any work of ours is queued (completion.ts)
    return new AttentionEngine(
      new WebGPUBackend({
        device,
        ownsDevice: false,
        adapterInfo: describeAdapter(device.adapterInfo),
        isFallbackAdapter: (device.adapterInfo as { isFallbackAdapter?: boolean } | undefined)?.isFallbackAdapter === true,
        limits,
        precision,
        profile,
        tuning,
      }),
      null,
    );
  }
  if (backend === 'cpu') return new AttentionEngine(new CpuBackend({ precision }), null);
  if (backend === 'wasm') return new AttentionEngine(await WasmBackend.create({ precision, threads: options.threads, simd: wasmSimd }), null);

  let acquired: AcquiredDevice;
  try {
    acquired = await acquireDevice();
  } catch (e) {
    if (backend === 'webgpu' || !(e instanceof WebGPUUnavailableError)) throw e;
    return withoutAdapter(e.message, precision);
  }
  await probeCompletion(acquired.device); // before any work of ours is queued (completion.ts)
  const gpu = new WebGPUBackend({
    device: acquired.device,
    ownsDevice: true,
    adapterInfo: acquired.adapterInfo,
    isFallbackAdapter: acquired.isFallbackAdapter,
    limits,
    precision,
    profile,
    tuning,
  });
  const software = acquired.isFallbackAdapter || adapterKind(acquired.adapterInfo) !== 'gpu';
  // An option only WebGPU honours counts as asking for it.
  const gpuOnly = options.limits !== undefined || options.tuning !== undefined || profile || precision === 'f16';
  if (backend === undefined && software && !gpuOnly) {
    const why = `no backend was asked for and the adapter (${adapterName(acquired.adapterInfo)}) runs its shaders on the CPU`;
    try {
      return new AttentionEngine(new AutoBackend(gpu, await WasmBackend.create({ precision }), why), null);
    } catch (e) {
      return new AttentionEngine(gpu, `${why}, but the 'wasm' backend could not start (${(e as Error).message}): WebGPU alone`);
    }
  }
  return new AttentionEngine(gpu, null);
}

/** No adapter and no backend asked for: the 'wasm' backend, else (no WebAssembly SIMD) the float64 reference. */
async function withoutAdapter(whyNoGpu: string, precision: 'f32' | 'f16'): Promise<AttentionEngine> {
  try {
    return new AttentionEngine(await WasmBackend.create({ precision }), `${whyNoGpu} So the 'wasm' backend runs (float32, WebAssembly SIMD).`);
  } catch (e) {
    return new AttentionEngine(
      new CpuBackend({ precision }),
      `${whyNoGpu} The 'wasm' backend could not start either (${(e as Error).message}): the float64 CPU reference runs.`,
    );
  }
}

function adapterName(info: AdapterInfo): string {
  return [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(' ') || 'unnamed';
}
