// Each kernel declares its bindings once (src/webgpu/bindings.ts): the WGSL `@group(0) @binding(i)`
// lines, the explicit bind group layout and the bind group's entries all come from that list. Checked
// here: the lines written into every kernel's shader agree with its layout, binding by binding; a bind
// group with a name missing or one too many is refused; and on a real device a pipeline built with
// the explicit layout takes a bind group built from the same declaration.

import { describe, expect, test } from 'vitest';
import { type BindingKind, type Bindings, defineBindings, PARAMS_BINDING } from '../src/webgpu/bindings.ts';
import { ATTENTION_VARIANTS } from '../src/webgpu/variants.ts';
import { ATTENTION_PROBS, attentionProbsPipeline, PROBS_BINDINGS } from '../src/webgpu/kernels/attention-probs.ts';
import { KV_MOVE_SCALES, KV_STORE } from '../src/webgpu/kernels/kv-store.ts';
import { kernelSpec } from '../src/webgpu/kernel.ts';
import { COPY_BINDINGS, COPY_ROWS_BINDINGS, copyRowsPipeline, copyTensorPipeline } from '../src/webgpu/kernels/copy-tensor.ts';
import { decodeMergePipeline, MERGE_BINDINGS } from '../src/webgpu/kernels/decode-merge.ts';
import { FLASH_BINDINGS, flashAttentionPipeline } from '../src/webgpu/kernels/flash-attention.ts';
import { headTransformPipeline, TRANSFORM_BINDINGS } from '../src/webgpu/kernels/head-transform.ts';
import { LINEAR_BINDINGS, linearAttentionPipeline } from '../src/webgpu/kernels/linear-attention.ts';
import { OUTPUT_BINDINGS, outputProjectionPipeline } from '../src/webgpu/kernels/output-projection.ts';
import { QKV_BINDINGS, qkvProjectionPipeline } from '../src/webgpu/kernels/qkv-projection.ts';
import { PROJECTION_VARIANTS } from '../src/webgpu/variants.ts';
import type { PipelineSpec } from '../src/webgpu/pipelines.ts';
import { MAP_MODE_READ, Usage } from '../src/webgpu/buffers.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const KIND_OF_VAR: Record<string, BindingKind> = { uniform: 'uniform', 'storage, read': 'read-only-storage', 'storage, read_write': 'storage' };

/** The bindings a WGSL source declares: [binding, kind, name, type], in the order written. */
function declared(code: string): [number, BindingKind, string, string][] {
  return [...code.matchAll(/@group\((\d+)\) @binding\((\d+)\) var<([^>]+)> (\w+): ([^;]+);/g)].map((m) => {
    expect(m[1]).toBe('0');
    return [Number(m[2]), KIND_OF_VAR[m[3]], m[4], m[5]];
  });
}

const KV_FORMATS = ['f32', 'f16x2', 'q8_0', 'q4_0'] as const;

/** A device with the limits the flash kernel's tiles read, that builds nothing. */
const tilesDevice = {
  limits: { maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupStorageSize: 16384 },
  adapterInfo: { subgroupMaxSize: 32 },
} as unknown as GPUDevice;

const kernels: [string, PipelineSpec, Bindings<string>][] = [
  ...ATTENTION_VARIANTS.map((v): [string, PipelineSpec, Bindings<string>] => [`flash_attention ${v}`, flashAttentionPipeline(tilesDevice, 'f32', 64, v), FLASH_BINDINGS]),
  ...PROJECTION_VARIANTS.flatMap((v): [string, PipelineSpec, Bindings<string>][] => [
    [`qkv_projection ${v}`, qkvProjectionPipeline('f32', v), QKV_BINDINGS],
    [`output_projection ${v}`, outputProjectionPipeline('f32', v), OUTPUT_BINDINGS],
  ]),
  ['attention_probs', attentionProbsPipeline('f16'), PROBS_BINDINGS],
  ['decode_merge', decodeMergePipeline('f32'), MERGE_BINDINGS],
  ['head_transform', headTransformPipeline('f32', 32), TRANSFORM_BINDINGS],
  ['linear_state', linearAttentionPipeline('f32', 32, 'state'), LINEAR_BINDINGS.state],
  ['linear_prefix', linearAttentionPipeline('f32', 32, 'prefix'), LINEAR_BINDINGS.prefix],
  ['linear_attention', linearAttentionPipeline('f32', 32, 'output'), LINEAR_BINDINGS.output],
  ['copy_tensor', copyTensorPipeline('f32'), COPY_BINDINGS],
  ['copy_rows', copyRowsPipeline('f32'), COPY_ROWS_BINDINGS],
];

describe('the WGSL bindings and the layout come from one declaration', () => {
  test.each(kernels)('%s: its shader declares exactly the layout, binding by binding', (_name, spec, bindings) => {
    expect(spec.bindings).toBe(bindings);
    const inShader = declared(spec.code);
    const fromLayout = bindings.layoutEntries.map((entry, i) => [entry.binding, entry.buffer?.type, bindings.decls[i][0], bindings.decls[i][2]]);
    expect(inShader).toEqual(fromLayout);
    expect(inShader.map(([binding]) => binding)).toEqual(inShader.map((_, i) => i));
    for (const entry of bindings.layoutEntries) expect(entry.visibility).toBe(0x4); // GPUShaderStage.COMPUTE
  });

  test('a specification is built once per variant and shape class', () => {
    expect(flashAttentionPipeline(tilesDevice, 'f32', 64, 'rows64-keys32')).toBe(flashAttentionPipeline(tilesDevice, 'f32', 64, 'rows64-keys32'));
    expect(flashAttentionPipeline(tilesDevice, 'f32', 64, 'rows64-keys32')).not.toBe(flashAttentionPipeline(tilesDevice, 'f32', 32, 'rows64-keys32'));
    expect(flashAttentionPipeline(tilesDevice, 'f32', 64, 'rows64-keys32', 'fn scoreMod(s: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return s; }').key).not.toBe(
      flashAttentionPipeline(tilesDevice, 'f32', 64, 'rows64-keys32').key,
    );
    expect(qkvProjectionPipeline('f16', 'register-4x4')).toBe(qkvProjectionPipeline('f16', 'register-4x4'));
    const keys = kernels.map(([, spec]) => spec.key);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('a bind group names exactly the declared bindings', () => {
  const bindings = defineBindings('Test', [PARAMS_BINDING, ['src', 'read-only-storage', 'array<f32>'], ['dst', 'storage', 'array<f32>']]);
  const made: GPUBindGroupDescriptor[] = [];
  const device = {
    createBindGroupLayout: (d: GPUBindGroupLayoutDescriptor) => ({ label: d.label }),
    createPipelineLayout: (d: GPUPipelineLayoutDescriptor) => ({ label: d.label }),
    createBindGroup: (d: GPUBindGroupDescriptor) => {
      made.push(d);
      return {};
    },
  } as unknown as GPUDevice;
  const buffer = (label: string) => ({ label }) as unknown as GPUBuffer;

  test('the entries are numbered in declaration order, whatever order the record lists them in', () => {
    const [params, src, dst] = [buffer('params'), buffer('src'), buffer('dst')];
    bindings.group(device, { dst, src: { buffer: src, size: 16 }, params });
    expect(made.at(-1)!.entries).toEqual([
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: src, size: 16 } },
      { binding: 2, resource: { buffer: dst } },
    ]);
    expect(made.at(-1)!.layout).toBe(bindings.layout(device)); // the one layout of this device
  });

  test('a missing or an extra name is refused (and is a type error)', () => {
    const b = buffer('b');
    // @ts-expect-error dst is missing
    expect(() => bindings.group(device, { params: b, src: b })).toThrow(/missing dst/);
    // @ts-expect-error out is not declared
    expect(() => bindings.group(device, { params: b, src: b, dst: b, out: b })).toThrow(/not declared out/);
    expect(() => defineBindings('Twice', [PARAMS_BINDING, PARAMS_BINDING])).toThrow(/declared twice/);
  });
});

test('on a device, every kernel and variant is valid WGSL, and a pipeline with the explicit layout takes the bind group of the same declaration', async () => {
  const engine = await createGpuEngine();
  const device = engine.device!;
  try {
    // Shader modules only (no pipelines: those compile, seconds each): the generated bindings, the
    // shared functions and each body parse and validate, at f16 and past Dh = 64 too.
    const specs = [
      ...kernels.map(([, spec]) => spec),
      ...ATTENTION_VARIANTS.flatMap((v) => [
        flashAttentionPipeline(device, 'f16', 128, v),
        flashAttentionPipeline(device, 'f32', 8, v, 'fn scoreMod(s: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return s; }'),
        // KV caches kept as another type: each body with each loader (shaders/kv_*.wgsl)
        ...KV_FORMATS.map((format) => flashAttentionPipeline(device, 'f32', 64, v, undefined, format)),
        flashAttentionPipeline(device, 'f16', 128, v, undefined, 'q4_0'),
      ]),
      ...KV_FORMATS.flatMap((format) => [kernelSpec(KV_STORE, 'f32', { format }), kernelSpec(KV_STORE, 'f16', { format })]),
      kernelSpec(ATTENTION_PROBS, 'f32', { scoreMod: undefined, kvFormat: 'q8_0' }),
      kernelSpec(KV_MOVE_SCALES, 'f32', {}),
    ];
    const errors: string[] = [];
    await withErrorScopes(device, async () => {
      for (const spec of specs) {
        const info = await device.createShaderModule({ label: spec.label, code: spec.code }).getCompilationInfo();
        for (const m of info.messages) if (m.type === 'error') errors.push(`${spec.key}: ${m.message} (line ${m.lineNum}: ${spec.code.split('\n')[m.lineNum - 1]})`);
      }
    });
    expect(errors).toEqual([]);
    await withErrorScopes(device, async () => {
      const spec = copyTensorPipeline('f32');
      const pipeline = await device.createComputePipelineAsync({
        layout: spec.bindings.pipelineLayout(device),
        compute: { module: device.createShaderModule({ code: spec.code }), entryPoint: 'main' },
      });
      const make = (size: number) => device.createBuffer({ size, usage: Usage.STORAGE | Usage.UNIFORM | Usage.COPY_SRC | Usage.COPY_DST });
      const [params, src, dst] = [make(16), make(64), make(64)];
      device.queue.writeBuffer(params, 0, new Uint32Array([4, 0, 0, 0])); // count4 = 4, dstOffset4 = 0
      device.queue.writeBuffer(
        src,
        0,
        Float32Array.from({ length: 16 }, (_, i) => i + 1),
      );
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, COPY_BINDINGS.group(device, { params, src, dst }));
      pass.dispatchWorkgroups(1);
      pass.end();
      const read = device.createBuffer({ size: 64, usage: Usage.MAP_READ | Usage.COPY_DST });
      encoder.copyBufferToBuffer(dst, 0, read, 0, 64);
      device.queue.submit([encoder.finish()]);
      await read.mapAsync(MAP_MODE_READ);
      expect([...new Float32Array(read.getMappedRange())]).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
      read.unmap();
      for (const b of [params, src, dst, read]) b.destroy();
    });
  } finally {
    engine.dispose();
  }
});
