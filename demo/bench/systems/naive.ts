// The naive baseline: the layer as a WebGPU tutorial writes it. A JS loop over heads; per head a Q,
// K and V projection (one GEMM each, one invocation per output element), the full score matrix
// S_h [B, S, S] with the causal mask written in, a row softmax, and P_h·V_h into that head's columns
// of a concat buffer; then the output projection. 5·H + 1 dispatches and a B·S·S scores buffer,
// where the engine has 3 dispatches and no scores at all.
//
// It is naive in its algorithm only: the weights are uploaded once, every buffer, uniform and bind
// group is made in prepare() for the one shape, and a forward is one command buffer and one readback,
// exactly as the engine's.
//
//   query    [B, S, E]
//     for h in 0..H:
//       linear.wgsl   Q_h, K_h, V_h [B·S, Dh] = query · W_in[rows of h]ᵀ + b_in      (3 dispatches)
//       scores.wgsl   Sc [B, S, S] = Q_h K_hᵀ / √Dh, masked j > i when causal
//       softmax.wgsl  P = softmax(Sc) row by row, in place
//       attend.wgsl   concat[:, :, h·Dh ..] = P · V_h
//     linear.wgsl     output [B·S, E] = concat · W_Oᵀ + b_O

import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import attendSource from './naive/attend.wgsl?raw';
import linearSource from './naive/linear.wgsl?raw';
import scoresSource from './naive/scores.wgsl?raw';
import softmaxSource from './naive/softmax.wgsl?raw';

const WG_2D = 8; // linear, scores and attend kernels: 8×8 invocations
const WG_1D = 64; // softmax: 64 rows per workgroup

function ceilDiv(a: number, b: number): number {
  return Math.ceil(a / b);
}

function checkLength(name: string, array: Float32Array | undefined, expected: number, shape: string): Float32Array {
  if (!array) throw new Error(`naive: stateDict['${name}'] is missing; expected a Float32Array ${shape}`);
  if (array.length !== expected) {
    throw new Error(`naive: stateDict['${name}'].length must be ${shape} = ${expected}; got ${array.length}`);
  }
  return array;
}

async function acquireDevice(): Promise<GPUDevice> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  if (!gpu) {
    throw new Error('naive: no navigator.gpu (WebGPU needs a secure context; on Linux Chromium also needs --enable-unsafe-webgpu)');
  }
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new Error('naive: navigator.gpu.requestAdapter() returned null (no WebGPU adapter)');
  return adapter.requestDevice({
    label: 'naive.device',
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
    },
  });
}

async function prepare(layer: BenchLayer): Promise<PreparedSystem> {
  const { batchSize: B, seqLen: S, embedDim: E, numHeads: H, isCausal } = layer.shape;
  if (!(E % H === 0)) throw new Error(`naive: embedDim ${E} must be divisible by numHeads ${H}`);
  const Dh = E / H;
  const M = B * S;
  const sd = layer.stateDict;
  const wIn = checkLength('in_proj_weight', sd.in_proj_weight, 3 * E * E, '[3E, E]');
  const wOut = checkLength('out_proj.weight', sd['out_proj.weight'], E * E, '[E, E]');
  // A layer without biases runs with zero biases (y = x·Wᵀ + 0).
  const bIn = sd.in_proj_bias ? checkLength('in_proj_bias', sd.in_proj_bias, 3 * E, '[3E]') : new Float32Array(3 * E);
  const bOut = sd['out_proj.bias'] ? checkLength('out_proj.bias', sd['out_proj.bias'], E, '[E]') : new Float32Array(E);

  const device = await acquireDevice();
  const limits = device.limits;
  const scoresBytes = B * S * S * 4;
  const biggest = Math.max(scoresBytes, 3 * E * E * 4, M * E * 4);
  if (biggest > limits.maxStorageBufferBindingSize || biggest > limits.maxBufferSize) {
    device.destroy();
    throw new Error(
      `naive: a buffer of ${biggest} bytes (the scores [B, S, S] = [${B}, ${S}, ${S}] are ${scoresBytes}) exceeds this ` +
        `adapter's maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize} / maxBufferSize ${limits.maxBufferSize}: ` +
        `the naive baseline materialises every score; use a smaller batchSize or seqLen`,
    );
  }
  const maxGroups = limits.maxComputeWorkgroupsPerDimension;
  const groups = [ceilDiv(E, WG_2D), ceilDiv(M, WG_2D), ceilDiv(S, WG_2D), B, ceilDiv(M, WG_1D)];
  if (groups.some((g) => g > maxGroups)) {
    device.destroy();
    throw new Error(`naive: B·S = ${M} needs ${Math.max(...groups)} workgroups in one dimension; this adapter allows ${maxGroups}`);
  }

  device.pushErrorScope('validation');
  const buffers: GPUBuffer[] = [];
  const storage = (label: string, size: number, extra = 0): GPUBuffer => {
    const buffer = device.createBuffer({ label: `naive.${label}`, size, usage: GPUBufferUsage.STORAGE | extra });
    buffers.push(buffer);
    return buffer;
  };
  const upload = (label: string, data: Float32Array): GPUBuffer => {
    const buffer = storage(label, data.byteLength, GPUBufferUsage.COPY_DST);
    device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
    return buffer;
  };
  const uniform = (label: string, words: ArrayBuffer): GPUBuffer => {
    const buffer = device.createBuffer({ label: `naive.${label}`, size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    buffers.push(buffer);
    device.queue.writeBuffer(buffer, 0, words);
    return buffer;
  };
  const u32s = (...v: number[]): ArrayBuffer => new Uint32Array(v).buffer;

  // Weights, once.
  const wInBuf = upload('inProjWeight', wIn); // [3E, E]
  const bInBuf = upload('inProjBias', bIn); // [3E]
  const wOutBuf = upload('outProjWeight', wOut); // [E, E]
  const bOutBuf = upload('outProjBias', bOut); // [E]
  // Activations of one forward; the per-head ones are reused by every head, in order.
  const queryBuf = storage('query', M * E * 4, GPUBufferUsage.COPY_DST); // [B, S, E]
  const qBuf = storage('q', M * Dh * 4); // Q_h [B, S, Dh]
  const kBuf = storage('k', M * Dh * 4); // K_h [B, S, Dh]
  const vBuf = storage('v', M * Dh * 4); // V_h [B, S, Dh]
  const scoresBuf = storage('scores', scoresBytes); // S_h, then P_h [B, S, S]
  const concatBuf = storage('concat', M * E * 4); // concat(heads) [B, S, E]
  const outBuf = storage('output', M * E * 4, GPUBufferUsage.COPY_SRC); // [B, S, E]
  const staging = device.createBuffer({ label: 'naive.staging', size: M * E * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  buffers.push(staging);

  // Each kernel's bind group layout written out, binding i for the i-th @binding of its WGSL (uniform
  // Params first): the layout is never inferred from the shader, so a binding its body stops using
  // still matches the bind group that names it.
  const kernel = (label: string, code: string, kinds: GPUBufferBindingType[]) => {
    const layout = device.createBindGroupLayout({
      label: `naive.${label}.bindGroupLayout`,
      entries: kinds.map((type, binding) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer: { type } })),
    });
    const pipeline = device.createComputePipeline({
      label: `naive.${label}`,
      layout: device.createPipelineLayout({ label: `naive.${label}.pipelineLayout`, bindGroupLayouts: [layout] }),
      compute: { module: device.createShaderModule({ label: `naive.${label}`, code }), entryPoint: 'main' },
    });
    return { layout, pipeline };
  };
  const linear = kernel('linear', linearSource, ['uniform', 'read-only-storage', 'read-only-storage', 'read-only-storage', 'storage']); // params, x, w, bias, y
  const scores = kernel('scores', scoresSource, ['uniform', 'read-only-storage', 'read-only-storage', 'storage']); // params, q, k, sc
  const softmax = kernel('softmax', softmaxSource, ['uniform', 'storage']); // params, p
  const attend = kernel('attend', attendSource, ['uniform', 'read-only-storage', 'read-only-storage', 'storage']); // params, p, v, o

  const bindGroup = (label: string, k: { layout: GPUBindGroupLayout }, resources: GPUBuffer[]): GPUBindGroup =>
    device.createBindGroup({
      label: `naive.${label}`,
      layout: k.layout,
      entries: resources.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });

  // Uniforms: Params of linear.wgsl {M, N, K, row0}, scores.wgsl {S, Dh, causal, scale},
  // softmax.wgsl {rows, S}, attend.wgsl {S, Dh, E, col0}.
  const scoresParams = new ArrayBuffer(16);
  new Uint32Array(scoresParams, 0, 3).set([S, Dh, isCausal ? 1 : 0]);
  new Float32Array(scoresParams, 12, 1)[0] = 1 / Math.sqrt(Dh);
  const scoresBind = bindGroup('scores', scores, [uniform('scoresParams', scoresParams), qBuf, kBuf, scoresBuf]);
  const softmaxBind = bindGroup('softmax', softmax, [uniform('softmaxParams', u32s(M, S, 0, 0)), scoresBuf]);
  const heads = Array.from({ length: H }, (_, h) => ({
    q: bindGroup(`q${h}`, linear, [uniform(`q${h}Params`, u32s(M, Dh, E, h * Dh)), queryBuf, wInBuf, bInBuf, qBuf]),
    k: bindGroup(`k${h}`, linear, [uniform(`k${h}Params`, u32s(M, Dh, E, E + h * Dh)), queryBuf, wInBuf, bInBuf, kBuf]),
    v: bindGroup(`v${h}`, linear, [uniform(`v${h}Params`, u32s(M, Dh, E, 2 * E + h * Dh)), queryBuf, wInBuf, bInBuf, vBuf]),
    attend: bindGroup(`attend${h}`, attend, [uniform(`attend${h}Params`, u32s(S, Dh, E, h * Dh)), scoresBuf, vBuf, concatBuf]),
  }));
  const outBind = bindGroup('out', linear, [uniform('outParams', u32s(M, E, E, 0)), concatBuf, wOutBuf, bOutBuf, outBuf]);

  const setupError = await device.popErrorScope();
  if (setupError) {
    device.destroy();
    throw new Error(`naive: WebGPU validation error while building the layer: ${setupError.message}`);
  }

  let disposed = false;
  let chain: Promise<unknown> = Promise.resolve(); // runs share buffers: one at a time

  async function forward(query: Float32Array): Promise<Float32Array> {
    if (disposed) throw new Error('naive: run() after dispose()');
    if (query.length !== M * E) throw new Error(`naive: query.length must be B·S·E = ${M * E}; got ${query.length}`);
    device.pushErrorScope('validation');
    device.queue.writeBuffer(queryBuf, 0, query.buffer, query.byteOffset, query.byteLength);
    const encoder = device.createCommandEncoder({ label: 'naive.forward' });
    const pass = encoder.beginComputePass({ label: 'naive.forward' });
    for (const head of heads) {
      pass.setPipeline(linear.pipeline);
      for (const bind of [head.q, head.k, head.v]) {
        pass.setBindGroup(0, bind);
        pass.dispatchWorkgroups(ceilDiv(Dh, WG_2D), ceilDiv(M, WG_2D)); // Q_h / K_h / V_h [B·S, Dh]
      }
      pass.setPipeline(scores.pipeline);
      pass.setBindGroup(0, scoresBind);
      pass.dispatchWorkgroups(ceilDiv(S, WG_2D), ceilDiv(S, WG_2D), B); // S_h [B, S, S]
      pass.setPipeline(softmax.pipeline);
      pass.setBindGroup(0, softmaxBind);
      pass.dispatchWorkgroups(ceilDiv(M, WG_1D)); // P_h [B, S, S]
      pass.setPipeline(attend.pipeline);
      pass.setBindGroup(0, head.attend);
      pass.dispatchWorkgroups(ceilDiv(Dh, WG_2D), ceilDiv(S, WG_2D), B); // concat[:, :, h·Dh ..]
    }
    pass.setPipeline(linear.pipeline);
    pass.setBindGroup(0, outBind);
    pass.dispatchWorkgroups(ceilDiv(E, WG_2D), ceilDiv(M, WG_2D)); // output [B·S, E]
    pass.end();
    encoder.copyBufferToBuffer(outBuf, 0, staging, 0, M * E * 4);
    device.queue.submit([encoder.finish()]);
    const mapped = staging.mapAsync(GPUMapMode.READ);
    const error = await device.popErrorScope();
    if (error) {
      await mapped.catch(() => undefined);
      if (staging.mapState === 'mapped') staging.unmap();
      throw new Error(`naive: WebGPU validation error in the forward: ${error.message}`);
    }
    await mapped;
    const output = new Float32Array(staging.getMappedRange().slice(0));
    staging.unmap();
    return output;
  }

  return {
    run(query: Float32Array): Promise<Float32Array> {
      const result = chain.then(() => forward(query));
      chain = result.catch(() => undefined);
      return result;
    },
    async dispose(): Promise<void> {
      if (disposed) return;
      disposed = true;
      await chain;
      for (const buffer of buffers) buffer.destroy();
      device.destroy();
    },
  };
}

export const naiveSystem: BenchSystem = {
  id: 'naive',
  label: 'Naive per-head loop (WebGPU)',
  prepare,
};
