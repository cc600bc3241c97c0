// AttentionEngine: picks the backend, owns the device and its memory, makes layers.

import type { Backend } from './backend.ts';
import { CpuBackend } from './cpu/backend.ts';
import { DisposedError, InvalidArgumentError, WebGPUUnavailableError } from './errors.ts';
import { MultiHeadAttention } from './layer.ts';
import { resolveAttentionPlan, resolveLayerSpec, resolveWeights } from './plan.ts';
import type {
  BackendKind,
  EngineOptions,
  EngineStats,
  ForwardResult,
  MultiHeadAttentionConfig,
  ScaledDotProductAttentionOptions,
  StateDict,
} from './types.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from './validate.ts';
import { WebGPUBackend } from './webgpu/backend.ts';
import { type AcquiredDevice, acquireDevice, describeAdapter } from './webgpu/device.ts';

const ENGINE_KEYS = ['backend', 'device', 'limits', 'precision', 'profile'] as const;
const LIMIT_KEYS = ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupsPerDimension'] as const;

export interface AdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
}

export class AttentionEngine {
  private readonly layers = new Set<MultiHeadAttention>();
  private impl: Backend | null;

  /** @internal Use createAttentionEngine(). */
  constructor(
    impl: Backend,
    /** Why the CPU backend was chosen when no backend was asked for; null otherwise. */
    readonly fallbackReason: string | null,
    private readonly requestedPrecision: 'f32' | 'f16' = 'f32',
  ) {
    this.impl = impl;
  }

  /** The adapter behind the current device; null on the CPU backend. */
  get adapterInfo(): AdapterInfo | null {
    const impl = this.live('adapterInfo');
    return impl instanceof WebGPUBackend ? impl.adapterInfo : null;
  }

  /** Which backend runs the layers. */
  get backend(): BackendKind {
    return this.live('backend').kind;
  }

  /**
   * Storage precision of weights, activations and KV caches on the GPU: 'f16' when asked for and
   * the adapter has shader-f16, else 'f32'. The CPU backend computes in float64 and reports 'f32'.
   */
  get precision(): 'f32' | 'f16' {
    const impl = this.live('precision');
    return impl instanceof WebGPUBackend ? impl.precision : 'f32';
  }

  /** Whether forwards report `timings` (kernel times from timestamp queries). */
  get profiling(): boolean {
    const impl = this.live('profiling');
    return impl instanceof WebGPUBackend && impl.profiling;
  }

  /** Why the precision asked for is not the one in use; null when it is. */
  get precisionNote(): string | null {
    const impl = this.live('precisionNote');
    if (impl instanceof WebGPUBackend) return impl.precisionNote;
    return this.requestedPrecision === 'f16' ? "precision 'f16' applies to WebGPU; the CPU backend computes in float64" : null;
  }

  /** The current GPU device (a new one after a recovered device loss), or null on the CPU backend. */
  get device(): GPUDevice | null {
    const impl = this.live('device');
    return impl instanceof WebGPUBackend ? impl.device : null;
  }

  /**
   * A multi-head attention layer with PyTorch nn.MultiheadAttention weights (state_dict names).
   * The weights are copied (uploaded once on WebGPU); later changes to the arrays do not affect the layer.
   */
  createMultiHeadAttention(config: MultiHeadAttentionConfig, stateDict: StateDict): MultiHeadAttention {
    const impl = this.live('createMultiHeadAttention');
    const spec = resolveLayerSpec(config);
    const weights = resolveWeights(spec, stateDict);
    const layer = new MultiHeadAttention(spec, impl.createLayer(spec, weights), (l) => this.layers.delete(l));
    this.layers.add(layer);
    return layer;
  }

  /**
   * The attention kernel alone, on tensors the caller already projected (after a rotary embedding,
   * say), as PyTorch's F.scaled_dot_product_attention: query [B, H, Sq, Dh], key and value
   * [B, G, Skv, Dh] → `{ output }` [B, H, Sq, Dh] (and `attentionWeights` [B, H, Sq, Skv] with needWeights).
   */
  async scaledDotProductAttention(
    query: Float32Array,
    key: Float32Array,
    value: Float32Array,
    options: ScaledDotProductAttentionOptions,
  ): Promise<ForwardResult> {
    const impl = this.live('scaledDotProductAttention');
    return impl.attend(resolveAttentionPlan(query, key, value, options));
  }

  /** GPU buffers and bytes the engine holds, weights included; zero on the CPU backend. */
  stats(): EngineStats {
    return this.live('stats').stats();
  }

  /** Releases every layer and all GPU memory at once; destroys the device if the engine created it. */
  dispose(): void {
    if (!this.impl) return;
    for (const layer of [...this.layers]) layer.dispose();
    this.impl.dispose();
    this.impl = null;
  }

  private live(what: string): Backend {
    if (!this.impl) throw new DisposedError(`AttentionEngine.${what}: this engine`, 'Create a new one with createAttentionEngine().');
    return this.impl;
  }
}

/**
 * Creates an engine. With no options: WebGPU when an adapter exists (browser navigator.gpu, or the
 * `webgpu` package in Node), else the CPU reference (engine.fallbackReason says why).
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
    if (backend === 'cpu') {
      throw new InvalidArgumentError({ where, argument: 'options.limits', expected: "left out with backend: 'cpu'", given: describe(options.limits) });
    }
  }
  if (backend !== undefined && backend !== 'webgpu' && backend !== 'cpu') {
    throw new InvalidArgumentError({ where, argument: 'options.backend', expected: '"webgpu", "cpu" or left out', given: describe(backend) });
  }
  if (device !== undefined) {
    if (typeof device !== 'object' || device === null || typeof (device as GPUDevice).createBuffer !== 'function') {
      throw new InvalidArgumentError({ where, argument: 'options.device', expected: 'a GPUDevice', given: describe(device) });
    }
    if (backend === 'cpu') {
      throw new InvalidArgumentError({
        where, argument: 'options.device', expected: "left out with backend: 'cpu'", given: 'a GPUDevice',
        fix: "Pass backend: 'webgpu' (or leave it out) to run on this device.",
      });
    }
    return new AttentionEngine(new WebGPUBackend(device, false, describeAdapter(device.adapterInfo), limits, precision, profile), null, precision);
  }
  if (backend === 'cpu') return new AttentionEngine(new CpuBackend(), null, precision);

  let acquired: AcquiredDevice;
  try {
    acquired = await acquireDevice();
  } catch (e) {
    if (backend === 'webgpu' || !(e instanceof WebGPUUnavailableError)) throw e;
    return new AttentionEngine(new CpuBackend(), e.message, precision);
  }
  return new AttentionEngine(new WebGPUBackend(acquired.device, true, acquired.adapterInfo, limits, precision, profile), null, precision);
}
