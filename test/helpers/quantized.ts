// Random packed weights for the 'wasm' kernels' tests (test/wasm-quant.test.ts, test/wasm-q8.test.ts) and
// the Chromium page of e2e/wasm-threads.ts: GGUF blocks and MatMulNBits tensors with sane scales.

import { GGUF_BLOCKS } from '../../src/quant/pack.ts';
import type { NBitsTensor, QuantizedTensor } from '../../src/quant/types.ts';
import { mulberry32 } from './random.ts';

/** f16 bits of a random value ±(1 + m/1024)·2^e (e ≥ −14: normal). */
export function half(e: number, rng: () => number, signed = true): number {
  const sign = signed && rng() < 0.5 ? 0x8000 : 0;
  return sign | ((e + 15) << 10) | Math.floor(rng() * 1024);
}

export type Kind = 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k' | `nbits${4 | 8}-${16 | 32 | 64 | 128 | 256}${'' | '-zp' | '-f32'}`;

/**
 * A quantized [N, K] tensor of random blocks whose weights are about ±1/√K (as trained layers'):
 * random bytes, then each block's f16 scale(s) overwritten with a sane value.
 */
export function randomQuantized(kind: Kind, N: number, K: number, seed: number): QuantizedTensor {
  const rng = mulberry32(seed);
  const bytes = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(rng() * 256));
  const setHalf = (d: Uint8Array, at: number, h: number) => {
    d[at] = h & 0xff;
    d[at + 1] = h >> 8;
  };
  const e = Math.floor(Math.log2(1 / Math.sqrt(K))); // the weights' exponent
  if (!kind.startsWith('nbits')) {
    const dtype = kind as keyof typeof GGUF_BLOCKS;
    const { bytes: size, weights } = GGUF_BLOCKS[dtype];
    const blocks = (N * K) / weights;
    const data = bytes(blocks * size);
    for (let b = 0; b < blocks; b++) {
      const at = b * size;
      if (dtype === 'q4_0') setHalf(data, at, half(e - 3, rng)); // (q − 8)·d, |q − 8| ≤ 8
      if (dtype === 'q8_0') setHalf(data, at, half(e - 7, rng)); // q·d, |q| ≤ 128
      if (dtype === 'q4_k') {
        setHalf(data, at, half(e - 9, rng, false)); // (d·sc)·q, sc ≤ 63, q ≤ 15
        setHalf(data, at + 2, half(e - 6, rng, false)); // − dmin·m, m ≤ 63
      }
      if (dtype === 'q6_k') setHalf(data, at + 208, half(Math.max(e - 12, -14), rng)); // (d·sc)·(q − 32), |sc| ≤ 128, |q − 32| ≤ 32
    }
    return { dtype, shape: [N, K], data };
  }
  const [, bitsText, blockText, extra] = /^nbits(\d)-(\d+)(?:-(\w+))?$/.exec(kind)!;
  const bits = Number(bitsText) as 4 | 8;
  const blockSize = Number(blockText) as NBitsTensor['blockSize'];
  const blocks = Math.ceil(K / blockSize);
  const data = bytes((N * blocks * blockSize * bits) / 8);
  const scaleExp = e - (bits - 1);
  const t: NBitsTensor = {
    dtype: 'nbits',
    bits,
    blockSize,
    shape: [N, K],
    data,
    scales:
      extra === 'f32'
        ? Float32Array.from({ length: N * blocks }, () => (rng() - 0.5) * 2 ** (scaleExp + 1))
        : Uint16Array.from({ length: N * blocks }, () => half(scaleExp, rng)),
  };
  if (extra === 'zp') t.zeroPoints = bytes(N * Math.ceil((blocks * bits) / 8));
  return t;
}
