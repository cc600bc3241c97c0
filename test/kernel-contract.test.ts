// Every kernel host module declares one contract (src/webgpu/kernel.ts Kernel): its name, Params,
// bindings, shader for a specialisation, and per dispatch the specialisation, uniforms, buffers and
// workgroups. Checked here, without a GPU: each kernel's specs carry its declarations; the cache key is
// derived from the specialisation (equal records give the same spec, different ones different keys,
// whatever the order of their fields), the precision and the subgroup emulation's lanes; and
// encodeKernel turns a kernel and its arguments into one pipeline, one uniform buffer, one bind group
// and one dispatch.

import { describe, expect, test } from 'vitest';
import { type Kernel, kernelSpec, type Specialisation, encodeKernel } from '../src/webgpu/kernel.ts';
import { ATTENTION_PROBS } from '../src/webgpu/kernels/attention-probs.ts';
import { COPY_PARAMS, COPY_ROWS, COPY_TENSOR } from '../src/webgpu/kernels/copy-tensor.ts';
import { DECODE_MERGE } from '../src/webgpu/kernels/decode-merge.ts';
import { FLASH_ATTENTION } from '../src/webgpu/kernels/flash-attention.ts';
import { HEAD_TRANSFORM } from '../src/webgpu/kernels/head-transform.ts';
import { KV_MOVE_SCALES, KV_STORE } from '../src/webgpu/kernels/kv-store.ts';
import { ACTIVATIONS_Q8 } from '../src/webgpu/kernels/activations-q8.ts';
import { KERNELS } from '../src/webgpu/kernels/index.ts';
import { LINEAR_ATTENTION } from '../src/webgpu/kernels/linear-attention.ts';
import { OUTPUT_GATE } from '../src/webgpu/kernels/output-gate.ts';
import { OUTPUT_PROJECTION } from '../src/webgpu/kernels/output-projection.ts';
import { PAGED_ATTENTION } from '../src/webgpu/kernels/paged-attention.ts';
import { PAGED_MOVE_SCALES, PAGED_QUANTIZE, PAGED_WRITE } from '../src/webgpu/kernels/paged-write.ts';
import { QKV_PROJECTION } from '../src/webgpu/kernels/qkv-projection.ts';
import type { CallScratch } from '../src/webgpu/scratch.ts';
import { subgroupEmulation } from '../src/webgpu/variants.ts';

const MOD = 'fn scoreMod(s: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return s; }';
const flash = (variant: string, headDim: number, scoreMod?: string, kvFormat?: string) => ({ variant, headDim, BR: 32, BC: 32, RPI: 1, scoreMod, kvFormat });

/** Specialisations of each kernel, pairwise different (one for a kernel that has a single one). */
const SAMPLES = new Map<Kernel<Specialisation, never>, Specialisation[]>([
  [
    QKV_PROJECTION,
    [
      { variant: 'register-4x4', bits: undefined },
      { variant: 'register-4x4', bits: 4 },
      { variant: 'subgroup-4x4', bits: 8 },
    ],
  ],
  [
    OUTPUT_PROJECTION,
    [
      { variant: 'register-8x8', bits: undefined },
      { variant: 'gemv', bits: 4 },
    ],
  ],
  [
    FLASH_ATTENTION,
    [
      flash('rows32-keys32', 64),
      flash('rows32-keys32', 32),
      flash('rows32-keys32', 64, MOD),
      flash('rows64-keys32', 64),
      // a KV cache kept as another type: its loader (shaders/kv_*.wgsl) and the kv binding's type
      flash('rows32-keys32', 64, undefined, 'q8_0'),
      flash('rows32-keys32', 64, undefined, 'q4_0'),
      flash('rows32-keys32', 64, undefined, 'f16x2'),
      flash('rows32-keys32', 64, undefined, 'f32'),
    ],
  ],
  [
    ATTENTION_PROBS,
    [
      { scoreMod: undefined, kvFormat: undefined },
      { scoreMod: MOD, kvFormat: undefined },
      { scoreMod: undefined, kvFormat: 'q8_0' },
    ],
  ],
  [KV_STORE, [{ format: 'q8_0' }, { format: 'q4_0' }, { format: 'f16x2' }, { format: 'f32' }]],
  [KV_MOVE_SCALES, [{}]],
  [HEAD_TRANSFORM, [{ headDim: 32 }, { headDim: 64 }]],
  [
    LINEAR_ATTENTION,
    [
      { pass: 'state', headDim: 32 },
      { pass: 'prefix', headDim: 32 },
      { pass: 'output', headDim: 32 },
      { pass: 'output', headDim: 16 },
    ],
  ],
  [DECODE_MERGE, [{}]],
  [OUTPUT_GATE, [{}]],
  [ACTIVATIONS_Q8, [{}]],
  [
    PAGED_WRITE,
    [
      { headDim: 32, format: 'st' },
      { headDim: 64, format: 'st' },
      { headDim: 32, format: 'f32' },
      { headDim: 64, format: 'f16x2' },
    ],
  ],
  [
    PAGED_QUANTIZE,
    [
      { headDim: 32, format: 'q8_0' },
      { headDim: 64, format: 'q4_0' },
    ],
  ],
  [PAGED_MOVE_SCALES, [{}]],
  [
    PAGED_ATTENTION,
    [
      { body: 'rows', format: 'st', headDim: 64, BR: 32, BC: 32, WG: 0, HPW: 1, LOOP: 1 },
      { body: 'rows', format: 'st', headDim: 64, BR: 32, BC: 32, WG: 0, HPW: 1, LOOP: 0 },
      { body: 'rows', format: 'st', headDim: 32, BR: 32, BC: 32, WG: 0, HPW: 4, LOOP: 1 },
      { body: 'keys', format: 'st', headDim: 64, BR: 0, BC: 0, WG: 32, HPW: 1, LOOP: 1 },
      { body: 'keys', format: 'st', headDim: 64, BR: 0, BC: 0, WG: 32, HPW: 1, LOOP: 0 },
      { body: 'keys', format: 'st', headDim: 32, BR: 0, BC: 0, WG: 16, HPW: 4, LOOP: 1 },
      { body: 'keys', format: 'st', headDim: 24, BR: 0, BC: 0, WG: 64, HPW: 2, LOOP: 1 },
      { body: 'keys', format: 'q8_0', headDim: 32, BR: 0, BC: 0, WG: 16, HPW: 4, LOOP: 1 },
      { body: 'rows', format: 'q4_0', headDim: 64, BR: 32, BC: 32, WG: 0, HPW: 1, LOOP: 1 },
      { body: 'rows', format: 'f16x2', headDim: 64, BR: 32, BC: 32, WG: 0, HPW: 1, LOOP: 0 },
    ],
  ],
  [COPY_TENSOR, [{}]],
  [COPY_ROWS, [{}]],
]);

describe('every kernel implements the contract', () => {
  test('the kernels are those sampled here, each named once', () => {
    expect(new Set(KERNELS)).toEqual(new Set(SAMPLES.keys()));
    expect(new Set(KERNELS.map((k) => k.name)).size).toBe(KERNELS.length);
  });

  test.each(KERNELS.map((k) => [k.name, k] as const))('%s: its specs carry its name, Params and bindings', (name, kernel) => {
    for (const s of SAMPLES.get(kernel)!) {
      const spec = kernelSpec(kernel, 'f32', s);
      expect(spec.key.startsWith(`${name}|f32|`)).toBe(true);
      expect(spec.label.startsWith(name)).toBe(true);
      expect(spec.bindings).toBe(kernel.bindings(s));
      expect(spec.bindings.decls[0][0]).toBe('params'); // the uniforms, bound first
      expect(spec.code).toContain(kernel.params.wgsl);
      expect(spec.code).toContain(spec.bindings.wgsl);
    }
  });
});

describe('the cache key is derived from the specialisation, the precision and the lanes', () => {
  const all = [...SAMPLES].flatMap(([kernel, list]) => list.map((s) => [kernel, s] as const));

  test('equal specialisations give the same spec, whatever the order of their fields', () => {
    for (const [kernel, s] of all) {
      const reversed = Object.fromEntries(Object.entries(s).reverse()) as Specialisation;
      expect(kernelSpec(kernel, 'f32', { ...s })).toBe(kernelSpec(kernel, 'f32', s));
      expect(kernelSpec(kernel, 'f32', reversed)).toBe(kernelSpec(kernel, 'f32', s));
    }
  });

  test('different specialisations, precisions or lanes give different keys', () => {
    const keys = all.flatMap(([kernel, s]) => [kernelSpec(kernel, 'f32', s).key, kernelSpec(kernel, 'f16', s).key]);
    expect(new Set(keys).size).toBe(keys.length);
    const [kernel, s] = all[0];
    const before = kernelSpec(kernel, 'f32', s);
    subgroupEmulation.lanes = 4;
    try {
      expect(kernelSpec(kernel, 'f32', s).key).not.toBe(before.key);
    } finally {
      subgroupEmulation.lanes = 0;
    }
  });
});

test('encodeKernel: one pipeline, the uniforms packed, a bind group of the declared buffers, the workgroups', () => {
  const calls: [string, unknown][] = [];
  const device = {
    createShaderModule: (d: GPUShaderModuleDescriptor) => ({ label: d.label }),
    createComputePipeline: (d: GPUComputePipelineDescriptor) => ({ label: d.label }),
    createBindGroupLayout: (d: GPUBindGroupLayoutDescriptor) => ({ label: d.label }),
    createPipelineLayout: (d: GPUPipelineLayoutDescriptor) => ({ label: d.label }),
    createBindGroup: (d: GPUBindGroupDescriptor) => d,
  } as unknown as GPUDevice;
  const uniforms: [ArrayBuffer, string][] = [];
  const scratch = {
    device,
    precision: 'f32',
    elementBytes: 4,
    uniforms: (data: ArrayBuffer, role: string) => {
      uniforms.push([data, role]);
      return { label: role } as unknown as GPUBuffer;
    },
  } as unknown as CallScratch;
  const pass = {
    setPipeline: (p: unknown) => calls.push(['setPipeline', p]),
    setBindGroup: (_i: number, g: unknown) => calls.push(['setBindGroup', g]),
    dispatchWorkgroups: (...groups: number[]) => calls.push(['dispatchWorkgroups', groups]),
  } as unknown as GPUComputePassEncoder;
  const [src, dst] = [{ label: 'src' }, { label: 'dst' }] as unknown as GPUBuffer[];
  const count = 4 * 256 * 70000; // more than 65535 workgroups: the rest go along y

  encodeKernel(pass, scratch, COPY_TENSOR, { src, dst, count, dstOffset: 8 });

  expect(calls.map(([what]) => what)).toEqual(['setPipeline', 'setBindGroup', 'dispatchWorkgroups']);
  expect(calls[0][1]).toEqual({ label: 'CopyTensor.pipeline' });
  expect(uniforms).toEqual([[COPY_PARAMS.pack({ count4: count / 4, dstOffset4: 2 }), 'CopyTensor.params']]);
  expect((calls[1][1] as GPUBindGroupDescriptor).entries).toEqual([
    { binding: 0, resource: { buffer: { label: 'CopyTensor.params' } } },
    { binding: 1, resource: { buffer: src, size: count * 4 } },
    { binding: 2, resource: { buffer: dst } },
  ]);
  expect(calls[2][1]).toEqual([65535, 2]);
});
