// The page Playwright drives for interop (e2e/interop.html): this engine between two layers of another
// WebGPU library, on that library's GPUDevice, GPU buffers passed both ways without a readback:
//
//   x ─(library) y = x·A + a─▶ GPUBuffer ─(engine) MHA, returnBuffer─▶ GPUBuffer ─(library) z·C + c─▶ out
//
// ONNX Runtime Web (WebGPU EP): the device is ORT's (`await ort.env.webgpu.device`, read after its
// first WebGPU session is created: in ORT 1.30 it resolves to undefined before that), the first
// session leaves its output on the GPU (preferredOutputLocation 'gpu-buffer': `tensor.gpuBuffer`),
// and the engine's output buffer goes back in through `ort.Tensor.fromGpuBuffer`. The other way
// round, ORT runs on the engine's device given in its EP options ({ name: 'webgpu', device }; setting
// ort.env.webgpu.device has no effect in 1.30). TensorFlow.js (WebGPU backend): the device is the backend's
// (`tf.backend().device`), `tensor.dataToGPU()` gives a GPU copy of a tensor's buffer, and
// `tf.tensor({ buffer, zeroCopy: true }, shape)` wraps the engine's output without a copy; the other
// way round, `new WebGPUBackend(engine.device)` registered as 'webgpu' in place of TF.js's default.
// Each run returns the library's output beside the same chain in float64 on the CPU.

import { createAttentionEngine, referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';

export interface InteropResult {
  /** The library's final output [S, E], read back at the very end. */
  output: number[];
  /** The same chain in float64 (the dense layers in float64, then referenceMultiHeadAttention). */
  reference: number[];
  /** The engine's device is the library's. */
  sameDevice: boolean;
  /** Where the library left its first output (ORT: 'gpu-buffer'; TF.js: 'gpu', from dataToGPU). */
  firstLocation: string;
  /** Validation or out-of-memory errors caught on the shared device during the chain. */
  gpuErrors: string[];
  /** What the library reports about itself. */
  label: string;
}

declare global {
  interface Window {
    interopReady: boolean;
    /** deviceFrom 'ort' (default): the engine on ORT's device; 'engine': ORT on the engine's. */
    runOrtInterop(deviceFrom?: 'ort' | 'engine'): Promise<InteropResult>;
    /** deviceFrom 'tfjs' (default): the engine on TF.js's device; 'engine': a TF.js WebGPU backend on the engine's. */
    runTfjsInterop(deviceFrom?: 'tfjs' | 'engine'): Promise<InteropResult>;
  }
}

const S = 12;
const E = 64;
const H = 4;
const LAYER = { embedDim: E, numHeads: H };

/** The chain's weights and input, seeded: A, C [E, E] (used as x·A), a, c [E]. */
function chainInputs(seed: number) {
  const rng = mulberry32(seed);
  const scale = 1 / Math.sqrt(E);
  return {
    x: uniform(S * E, 1, rng),
    A: uniform(E * E, scale, rng),
    a: uniform(E, 0.1, rng),
    C: uniform(E * E, scale, rng),
    c: uniform(E, 0.1, rng),
    stateDict: randomStateDict(LAYER, seed + 1),
  };
}

/** y[S, E] = x·W + b in float64. */
function dense64(x: ArrayLike<number>, W: Float32Array, b: Float32Array): Float64Array {
  const y = new Float64Array(S * E);
  for (let s = 0; s < S; s++) {
    for (let j = 0; j < E; j++) {
      let acc = b[j];
      for (let i = 0; i < E; i++) acc += x[s * E + i] * W[i * E + j];
      y[s * E + j] = acc;
    }
  }
  return y;
}

function reference(inputs: ReturnType<typeof chainInputs>): number[] {
  // The reference takes float32 inputs: y rounded once, as the library's own y is.
  const y = new Float32Array(dense64(inputs.x, inputs.A, inputs.a));
  const attended = referenceMultiHeadAttention(LAYER, inputs.stateDict, y, { batchSize: 1, seqLen: S }).output;
  return Array.from(dense64(attended, inputs.C, inputs.c));
}

/** Runs `fn` inside validation and out-of-memory error scopes of `device`; returns what they caught. */
async function scoped(device: GPUDevice, fn: () => Promise<void>): Promise<string[]> {
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let thrown: unknown = null;
  try {
    await fn();
  } catch (e) {
    thrown = e;
  }
  const caught = [await device.popErrorScope(), await device.popErrorScope()].filter((e) => e !== null).map((e) => e.message);
  if (thrown) throw thrown;
  return caught;
}

window.runOrtInterop = async (deviceFrom = 'ort') => {
  const { loadOrt } = await import('../demo/bench/systems/ort.ts');
  const { buildDenseModel } = await import('../demo/bench/systems/onnx-model.ts');
  const ort = await loadOrt();
  const inputs = chainInputs(11);
  // 'engine': the engine's device, given to each ORT session in its WebGPU EP options. (Setting
  // ort.env.webgpu.device instead has no effect in ORT 1.30: its WebGPU EP creates its own device and
  // writes that into env.webgpu.device.)
  const own = deviceFrom === 'engine' ? await createAttentionEngine({ tuning: { mode: 'off' } }) : null;
  const ep = own ? { name: 'webgpu', device: own.device! } : 'webgpu';
  const options = { executionProviders: [ep], extra: { session: { disable_cpu_ep_fallback: '1' } } };
  const pre = await ort.InferenceSession.create(await buildDenseModel([1, S, E], inputs.A, inputs.a), { ...options, preferredOutputLocation: 'gpu-buffer' });
  const post = await ort.InferenceSession.create(await buildDenseModel([1, S, E], inputs.C, inputs.c), options);
  // 'ort': ORT's device, which exists once its first WebGPU session does (1.30: read before that, it
  // resolves to undefined). 'engine': the engine's, which ORT's sessions were given (and forward()
  // below refuses a buffer of any other device).
  const device = own ? own.device : ((await ort.env.webgpu.device) as GPUDevice | undefined);
  if (!device) throw new Error('ort.env.webgpu.device resolved to no GPUDevice after a WebGPU session was created');
  const engine = own ?? (await createAttentionEngine({ device, tuning: { mode: 'off' } })); // 'off': no background sweeps in a test
  const sameDevice = engine.device === device;
  const mha = engine.createMultiHeadAttention(LAYER, inputs.stateDict);
  let output: Float32Array | null = null;
  let firstLocation = '';
  const gpuErrors = await scoped(device, async () => {
    const x = new ort.Tensor('float32', inputs.x, [1, S, E]);
    const { y } = await pre.run({ x }); // y stays on the GPU
    firstLocation = y.location;
    if (y.location !== 'gpu-buffer') throw new Error(`ORT left its output on '${y.location}', not 'gpu-buffer'`);
    const { outputBuffer } = await mha.forward(y.gpuBuffer as GPUBuffer, { batchSize: 1, seqLen: S, returnBuffer: true });
    const z = ort.Tensor.fromGpuBuffer(outputBuffer, { dataType: 'float32', dims: [1, S, E] });
    const result = await post.run({ x: z });
    output = (await result.y.getData()) as Float32Array; // the only readback, at the end
    y.dispose();
    z.dispose();
    outputBuffer.destroy(); // returned buffers are the caller's
  });
  mha.dispose();
  await pre.release();
  await post.release();
  engine.dispose(); // destroys the engine's own device ('engine', after ORT's sessions), never ORT's ('ort')
  return {
    output: Array.from(output ?? []),
    reference: reference(inputs),
    sameDevice,
    firstLocation,
    gpuErrors,
    label: `ONNX Runtime Web ${ort.env.versions?.web ?? '?'} (WebGPU EP)`,
  };
};

window.runTfjsInterop = async (deviceFrom = 'tfjs') => {
  const tf = await import('@tensorflow/tfjs-core');
  const { WebGPUBackend } = await import('@tensorflow/tfjs-backend-webgpu');
  // 'engine': TF.js's WebGPU backend made on the engine's device, registered as 'webgpu' in place of the
  // default one (its kernels are registered for the name 'webgpu'; under another name it has none).
  const own = deviceFrom === 'engine' ? await createAttentionEngine({ tuning: { mode: 'off' } }) : null;
  if (own) {
    tf.removeBackend('webgpu');
    tf.registerBackend('webgpu', () => new WebGPUBackend(own.device!));
  }
  if (!(await tf.setBackend('webgpu'))) throw new Error("TensorFlow.js could not start its backend 'webgpu'");
  const backend = tf.backend();
  if (!(backend instanceof WebGPUBackend)) throw new Error('tf.backend() is not a WebGPU backend');
  const device = backend.device;
  const engine = own ?? (await createAttentionEngine({ device, tuning: { mode: 'off' } }));
  const sameDevice = engine.device === device;
  const inputs = chainInputs(12);
  const mha = engine.createMultiHeadAttention(LAYER, inputs.stateDict);
  let output: Float32Array | null = null;
  let firstLocation = '';
  const gpuErrors = await scoped(device, async () => {
    const A = tf.tensor2d(inputs.A, [E, E]);
    const C = tf.tensor2d(inputs.C, [E, E]);
    const y = tf.tidy(() => tf.add(tf.matMul(tf.tensor2d(inputs.x, [S, E]), A), tf.tensor1d(inputs.a)));
    // A GPU copy of y's buffer, its commands submitted: the engine's work queues after them.
    const gpu = y.dataToGPU();
    firstLocation = gpu.buffer instanceof GPUBuffer ? 'gpu' : `no GPUBuffer (${String(gpu.buffer)})`;
    const { outputBuffer } = await mha.forward(gpu.buffer!, { batchSize: 1, seqLen: S, returnBuffer: true });
    const z = tf.tensor({ buffer: outputBuffer, zeroCopy: true }, [S, E], 'float32'); // wraps the buffer, no copy
    const out = tf.tidy(() => tf.add(tf.matMul(z, C), tf.tensor1d(inputs.c)));
    output = (await out.data()) as Float32Array; // the only readback, at the end
    tf.dispose([A, C, y, z, out, gpu.tensorRef]);
    outputBuffer.destroy(); // zeroCopy: TF.js never owned it
  });
  mha.dispose();
  if (own) tf.removeBackend('webgpu'); // disposes the backend on the engine's device before the engine destroys it
  engine.dispose(); // never destroys TF.js's device ('tfjs')
  return {
    output: Array.from(output ?? []),
    reference: reference(inputs),
    sameDevice,
    firstLocation,
    gpuErrors,
    label: `TensorFlow.js ${tf.version_core} (WebGPU backend)`,
  };
};

window.interopReady = true;
