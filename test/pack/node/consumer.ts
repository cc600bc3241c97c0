// Type-checked against the installed tarball by scripts/pack-test.mjs with test/pack/node/tsconfig.json
// (moduleResolution nodenext, lib ES2022 only, no `types`): the published .d.ts must bring the
// WebGPU types themselves. Never run.
import {
  type AdapterInfo,
  type AttentionEngine,
  AttentionError,
  createAttentionEngine,
  type EngineOptions,
  type ForwardResult,
  type MultiHeadAttentionConfig,
  referenceMultiHeadAttention,
  type ReferenceResult,
  ShapeMismatchError,
  type StateDict,
} from 'webgpu-attention';
// @ts-expect-error internal modules are not part of the package's exports
import type {} from 'webgpu-attention/dist/webgpu/device.js';

export async function example(device?: GPUDevice): Promise<Float32Array> {
  const options: EngineOptions = device ? { device } : { backend: 'cpu' };
  const engine: AttentionEngine = await createAttentionEngine(options);
  const info: AdapterInfo | null = engine.adapterInfo;
  const gpuDevice: GPUDevice | null = engine.device;
  void info;
  void gpuDevice;
  const config: MultiHeadAttentionConfig = { embedDim: 8, numHeads: 2 };
  const weights: StateDict = { in_proj_weight: new Float32Array(3 * 64) };
  const layer = engine.createMultiHeadAttention(config, weights);
  try {
    const result: ForwardResult = await layer.forward(new Float32Array(8), { batchSize: 1, seqLen: 1, isCausal: true });
    const reference: ReferenceResult = referenceMultiHeadAttention(config, weights, new Float32Array(8), { batchSize: 1, seqLen: 1 });
    void reference;
    return result.output;
  } catch (e) {
    if (e instanceof ShapeMismatchError) throw new Error(e.argument);
    if (e instanceof AttentionError) throw e;
    throw e;
  } finally {
    layer.dispose();
    engine.dispose();
  }
}
