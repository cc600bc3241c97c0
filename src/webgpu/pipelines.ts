// Shader modules and compute pipelines, cached per device. The cache is a WeakMap keyed by the
// device, so a destroyed or lost device takes its pipelines with it.
//
// A pipeline is built either on first use, synchronously (getPipeline, inside a call's encoding), or
// ahead of use without blocking (compilePipeline: createComputePipelineAsync, which browsers and Dawn
// run off the calling thread). Both fill the same cache, and a compile already under way is shared.
// Some drivers (lavapipe) compile only at a pipeline's first dispatch, so the cache also records
// which pipelines have run (tuning/scheduler.ts decides by that).
//
// A spec carries its key (the kernel, precision and specialisation it was built for, derived by
// kernel.ts kernelSpec, which builds each spec once per key), which is what the caches here go by,
// never the source text; and its bindings (bindings.ts), whose explicit pipeline layout it is built with.

import type { Bindings } from './bindings.ts';

interface DeviceCache {
  modules: Map<string, GPUShaderModule>;
  pipelines: Map<string, GPUComputePipeline>;
  compiling: Map<string, Promise<GPUComputePipeline>>;
  /** Pipelines that have run at least once: some drivers (lavapipe) compile at the first dispatch. */
  run: Set<string>;
}

const caches = new WeakMap<GPUDevice, DeviceCache>();

function cacheOf(device: GPUDevice): DeviceCache {
  let cache = caches.get(device);
  if (!cache) {
    cache = { modules: new Map(), pipelines: new Map(), compiling: new Map(), run: new Set() };
    caches.set(device, cache);
  }
  return cache;
}

/** What a compute pipeline is built from. */
export interface PipelineSpec {
  /** What it was built for, unique per source and constants: `Owner|precision|lanes…|field=value…` (the caches' key, kernel.ts kernelKey). */
  key: string;
  /** Labels the module and pipeline: `Owner.role`. */
  label: string;
  /** Complete WGSL source (shader.ts shaderCode). */
  code: string;
  /** Values of the shader's `override` constants. */
  constants?: Record<string, number>;
  /** The shader's bindings: the explicit layout the pipeline is built with. */
  bindings: Bindings<string>;
}

function keyOf(spec: PipelineSpec): string {
  return spec.key;
}

function moduleFor(device: GPUDevice, cache: DeviceCache, spec: PipelineSpec): GPUShaderModule {
  // By source: variants differing only in override constants share a module (looked up only when a pipeline is built).
  let module = cache.modules.get(spec.code);
  if (!module) {
    module = device.createShaderModule({ label: `${spec.label}.module`, code: spec.code });
    cache.modules.set(spec.code, module);
  }
  return module;
}

function descriptor(device: GPUDevice, module: GPUShaderModule, spec: PipelineSpec): GPUComputePipelineDescriptor {
  return { label: `${spec.label}.pipeline`, layout: spec.bindings.pipelineLayout(device), compute: { module, entryPoint: 'main', constants: spec.constants ?? {} } };
}

/** The pipeline for this spec on this device, built now if no one has built it. */
export function getPipeline(device: GPUDevice, spec: PipelineSpec): GPUComputePipeline {
  const cache = cacheOf(device);
  const key = keyOf(spec);
  let pipeline = cache.pipelines.get(key);
  if (pipeline) return pipeline;
  pipeline = device.createComputePipeline(descriptor(device, moduleFor(device, cache, spec), spec));
  cache.pipelines.set(key, pipeline);
  return pipeline;
}

/** Whether the pipeline has been dispatched once already (markRun): then it is compiled on every driver. */
export function hasRun(device: GPUDevice, spec: PipelineSpec): boolean {
  return cacheOf(device).run.has(keyOf(spec));
}

/** Records that the pipeline has been (or is being) dispatched. */
export function markRun(device: GPUDevice, spec: PipelineSpec): void {
  cacheOf(device).run.add(keyOf(spec));
}

/** Builds the pipeline without blocking the caller (createComputePipelineAsync); resolves when getPipeline would answer at once. */
export function compilePipeline(device: GPUDevice, spec: PipelineSpec): Promise<void> {
  const cache = cacheOf(device);
  const key = keyOf(spec);
  if (cache.pipelines.has(key)) return Promise.resolve();
  let compiling = cache.compiling.get(key);
  if (!compiling) {
    compiling = device.createComputePipelineAsync(descriptor(device, moduleFor(device, cache, spec), spec));
    cache.compiling.set(key, compiling);
    compiling.then(
      (pipeline) => {
        if (!cache.pipelines.has(key)) cache.pipelines.set(key, pipeline);
        cache.compiling.delete(key);
      },
      () => cache.compiling.delete(key),
    );
  }
  return compiling.then(() => {});
}
