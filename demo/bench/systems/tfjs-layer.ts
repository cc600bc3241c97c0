// The layer composed from TensorFlow.js ops, as a TF.js user would write it: shared by the peers
// "tfjs" (WebGPU backend) and "tfjs-wasm" (WASM backend). TF.js picks its own kernels per backend.
//
//   x     [B·S, E]                      query
//   qkv   [B·S, 3E] = x · W_inᵀ + b_in  (matMul with transposeB: PyTorch weights as they are)
//   q,k,v [B·H, S, Dh]                  split, reshape [B, S, H, Dh], transpose [B, H, S, Dh]
//   sc    [B·H, S, S] = q·kᵀ · 1/√Dh (+ mask [S, S]: 0 where j ≤ i, −1e9 above the diagonal)
//   p     = softmax(sc) along the keys
//   o     [B·H, S, Dh] = p·v → [B, H, S, Dh] → transpose [B, S, H, Dh] → [B·S, E]
//   y     [B·S, E] = o · W_Oᵀ + b_O
//
// The mask is additive: −1e9 + a score rounds to −1e9 in f32, and exp(−1e9 − rowMax) is exactly 0,
// so masked keys get probability 0 without the ∞ − ∞ that an additive −Infinity could make. Every
// causal row sees key 0, so no row is fully masked.
//
// One TF.js engine serves the whole page, and its active backend is global: the layer's tensors live
// on the backend that was active when they were made, and TF.js would quietly move them to another
// one. So prepare() and every run() first make `backend` the active one (the other TF.js system may
// have switched it since), and a layer only ever runs on the backend it was built for.

import type { BenchLayer, PreparedSystem } from '../types.ts';

type Tf = typeof import('@tensorflow/tfjs-core');
type Tensor = import('@tensorflow/tfjs-core').Tensor;

function checkLength(who: string, name: string, array: Float32Array | undefined, expected: number, shape: string): Float32Array {
  if (!array) throw new Error(`${who}: stateDict['${name}'] is missing; expected a Float32Array ${shape}`);
  if (array.length !== expected) {
    throw new Error(`${who}: stateDict['${name}'].length must be ${shape} = ${expected}; got ${array.length}`);
  }
  return array;
}

/** Makes `backend` TF.js's active backend (already registered and initialised once by the caller). */
export async function useBackend(tf: Tf, backend: string, who: string): Promise<void> {
  if (tf.getBackend() === backend) return;
  const ok = await tf.setBackend(backend);
  if (!ok || tf.getBackend() !== backend) throw new Error(`${who}: TensorFlow.js could not switch to its '${backend}' backend (active: ${tf.getBackend()})`);
}

/** The layer on TF.js's `backend`; `who` names the system in errors ('tfjs', 'tfjs-wasm'). */
export async function prepareTfjsLayer(tf: Tf, backend: string, who: string, layer: BenchLayer): Promise<PreparedSystem> {
  const { batchSize: B, seqLen: S, embedDim: E, numHeads: H, isCausal } = layer.shape;
  if (!(E % H === 0)) throw new Error(`${who}: embedDim ${E} must be divisible by numHeads ${H}`);
  const Dh = E / H;
  const sd = layer.stateDict;
  const wInData = checkLength(who, 'in_proj_weight', sd.in_proj_weight, 3 * E * E, '[3E, E]');
  const wOutData = checkLength(who, 'out_proj.weight', sd['out_proj.weight'], E * E, '[E, E]');
  const bInData = sd.in_proj_bias ? checkLength(who, 'in_proj_bias', sd.in_proj_bias, 3 * E, '[3E]') : new Float32Array(3 * E);
  const bOutData = sd['out_proj.bias'] ? checkLength(who, 'out_proj.bias', sd['out_proj.bias'], E, '[E]') : new Float32Array(E);

  await useBackend(tf, backend, who);
  // Weights uploaded once (tf.tensor copies the data), on `backend`.
  const wIn = tf.tensor2d(wInData, [3 * E, E]); // [3E, E]
  const bIn = tf.tensor1d(bInData); // [3E]
  const wOut = tf.tensor2d(wOutData, [E, E]); // [E, E]
  const bOut = tf.tensor1d(bOutData); // [E]
  const scale = tf.scalar(1 / Math.sqrt(Dh));
  let mask: Tensor | null = null; // [S, S]: 0 on and below the diagonal, −1e9 above
  if (isCausal) {
    const m = new Float32Array(S * S);
    for (let i = 0; i < S; i++) for (let j = i + 1; j < S; j++) m[i * S + j] = -1e9;
    mask = tf.tensor2d(m, [S, S]);
  }
  const weights: Tensor[] = [wIn, bIn, wOut, bOut, scale, ...(mask ? [mask] : [])];
  let disposed = false;

  /** [B·S, E] → [B·H, S, Dh] */
  const toHeads = (t: Tensor): Tensor => tf.reshape(tf.transpose(tf.reshape(t, [B, S, H, Dh]), [0, 2, 1, 3]), [B * H, S, Dh]);

  return {
    async run(query: Float32Array): Promise<Float32Array> {
      if (disposed) throw new Error(`${who}: run() after dispose()`);
      if (query.length !== B * S * E) throw new Error(`${who}: query.length must be B·S·E = ${B * S * E}; got ${query.length}`);
      await useBackend(tf, backend, who);
      const y = tf.tidy(() => {
        const x = tf.tensor2d(query, [B * S, E]); // [B·S, E]
        const qkv = tf.add(tf.matMul(x, wIn, false, true), bIn); // [B·S, 3E]
        const [q, k, v] = tf.split(qkv, 3, 1).map(toHeads); // [B·H, S, Dh] each
        let scores = tf.mul(tf.matMul(q, k, false, true), scale); // [B·H, S, S]
        if (mask) scores = tf.add(scores, mask); // broadcast over B·H
        const p = tf.softmax(scores); // along the keys
        const o = tf.matMul(p, v); // [B·H, S, Dh]
        const concat = tf.reshape(tf.transpose(tf.reshape(o, [B, H, S, Dh]), [0, 2, 1, 3]), [B * S, E]);
        return tf.add(tf.matMul(concat, wOut, false, true), bOut); // [B·S, E]
      });
      try {
        const data = await y.data();
        return data instanceof Float32Array ? data : Float32Array.from(data as ArrayLike<number>);
      } finally {
        y.dispose();
      }
    },
    dispose(): void {
      if (disposed) return;
      disposed = true;
      for (const t of weights) t.dispose();
    },
  };
}
