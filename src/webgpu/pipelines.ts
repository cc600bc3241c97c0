// Shader modules and compute pipelines, cached per device and per variant. The cache is a WeakMap
// keyed by the device, so a destroyed or lost device takes its pipelines with it.

interface DeviceCache {
  modules: Map<string, GPUShaderModule>;
  pipelines: Map<string, GPUComputePipeline>;
}

const caches = new WeakMap<GPUDevice, DeviceCache>();

function cacheOf(device: GPUDevice): DeviceCache {
  let cache = caches.get(device);
  if (!cache) {
    cache = { modules: new Map(), pipelines: new Map() };
    caches.set(device, cache);
  }
  return cache;
}

export interface PipelineVariant {
  /** Labels the module and pipeline: `Owner.role`. */
  label: string;
  /** Complete WGSL source (after any constant prelude). */
  code: string;
  /** Values of the shader's `override` constants. */
  constants?: Record<string, number>;
}

/** The pipeline for this source and these constants on this device, built on first use. */
export function getPipeline(device: GPUDevice, variant: PipelineVariant): GPUComputePipeline {
  const cache = cacheOf(device);
  const constants = variant.constants ?? {};
  const key = `${variant.label}|${JSON.stringify(constants)}|${variant.code}`;
  let pipeline = cache.pipelines.get(key);
  if (pipeline) return pipeline;
  let module = cache.modules.get(variant.code);
  if (!module) {
    module = device.createShaderModule({ label: `${variant.label}.module`, code: variant.code });
    cache.modules.set(variant.code, module);
  }
  pipeline = device.createComputePipeline({
    label: `${variant.label}.pipeline`,
    layout: 'auto',
    compute: { module, entryPoint: 'main', constants },
  });
  cache.pipelines.set(key, pipeline);
  return pipeline;
}

/**
 * Specialises a shader: `ST4`, the storage type of its tensors (vec4<f32>, or vec4<f16> with
 * `enable f16;` for precision f16), `SM4`, the mat4x4 of that type, and `const NAME: u32 = value;`
 * lines for sizes WGSL needs at compile time (private array lengths). Text, because overrides reach
 * neither.
 */
export function specialise(code: string, precision: 'f32' | 'f16', constants: Record<string, number> = {}): string {
  const prelude = [
    ...(precision === 'f16' ? ['enable f16;', 'alias ST4 = vec4<f16>;', 'alias SM4 = mat4x4<f16>;'] : ['alias ST4 = vec4<f32>;', 'alias SM4 = mat4x4<f32>;']),
    ...Object.entries(constants).map(([name, value]) => `const ${name}: u32 = ${value}u;`),
  ].join('\n');
  return `${prelude}\n${code}`;
}
