// Any conformant adapter: a device created with WebGPU's default limits only (16 KiB of workgroup
// memory, 256 invocations per workgroup, 8 storage buffers per stage, 128 MiB per storage binding),
// as the least capable adapters give. The engine's built-in kernels for the adapter kind run the whole
// GPU-vs-CPU grid on it (test/helpers/gpu-vs-cpu-grid.ts), and what does not fit one binding is refused
// with a DeviceLimitError that names it.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AttentionEngine, DeviceLimitError } from '../src/index.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { describeGpuVsCpuGrid } from './helpers/gpu-vs-cpu-grid.ts';

/** WebGPU's default limits (the spec's "default" column): what a device gets when it asks for none. */
const DEFAULTS = {
  maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256,
  maxStorageBuffersPerShaderStage: 8,
  maxStorageBufferBindingSize: 134217728,
};

let engine: AttentionEngine;
let device: GPUDevice;
/** Kept for the file's life: Dawn's instance, collected, takes its devices with it (the process crashed). */
let gpu: GPU;

beforeAll(async () => {
  const { create, globals } = (await import('webgpu')) as unknown as { create: (flags: string[]) => GPU; globals: object };
  Object.assign(globalThis, globals);
  gpu = create([]);
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter: run `bash scripts/setup-system.sh lavapipe` (GPU tests never skip)');
  // The engine's optional features, and no limits asked for: every limit is WebGPU's default.
  const requiredFeatures = (['shader-f16', 'timestamp-query', 'subgroups'] as const).filter((f) => adapter.features.has(f));
  device = await adapter.requestDevice({ requiredFeatures });
  engine = await createGpuEngine({ device });
});
afterAll(() => {
  engine?.dispose();
  device?.destroy();
});

test('the device has the default limits only (the adapter offers more)', () => {
  for (const [name, value] of Object.entries(DEFAULTS)) expect(device.limits[name as keyof typeof DEFAULTS], name).toBe(value);
});

describe('webgpu (default limits) vs CPU reference', () => {
  describeGpuVsCpuGrid(() => engine);
});

describe('what does not fit one storage binding is refused, naming it', () => {
  test('an in_proj_weight over maxStorageBufferBindingSize (E = 4096: 192 MiB)', () => {
    const E = 4096;
    const layer = { embedDim: E, numHeads: 32 };
    const stateDict = {
      in_proj_weight: new Float32Array(3 * E * E),
      in_proj_bias: new Float32Array(3 * E),
      'out_proj.weight': new Float32Array(E * E),
      'out_proj.bias': new Float32Array(E),
    };
    let error: unknown;
    try {
      engine.createMultiHeadAttention(layer, stateDict).dispose();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DeviceLimitError);
    expect((error as Error).message).toMatch(/in_proj_weight/);
    expect((error as Error).message).toMatch(/maxStorageBufferBindingSize = 134217728/);
  });

  test('a KV cache over maxStorageBufferBindingSize', () => {
    const layer = { embedDim: 64, numHeads: 4 };
    const sd = {
      in_proj_weight: new Float32Array(3 * 64 * 64),
      in_proj_bias: new Float32Array(3 * 64),
      'out_proj.weight': new Float32Array(64 * 64),
      'out_proj.bias': new Float32Array(64),
    };
    const mha = engine.createMultiHeadAttention(layer, sd);
    try {
      // 2 · 8 · 4 · 65536 · 16 · 4 bytes = 256 MiB
      expect(() => mha.createKvCache({ batchSize: 8, maxSeqLen: 65536 })).toThrow(DeviceLimitError);
      expect(() => mha.createKvCache({ batchSize: 8, maxSeqLen: 65536 })).toThrow(/createKvCache.*maxStorageBufferBindingSize/s);
    } finally {
      mha.dispose();
    }
  });
});
