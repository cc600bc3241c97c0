// Random quantized projection weights for the quantized-weights benchmark (scripts/bench-quantized.ts in
// Node, demo/bench/quantized-page.ts in Chromium): random blocks of each type with small scales (a real
// model's magnitudes; the speed does not depend on the values), seeded so every run packs the same bytes.

import { GGUF_BLOCKS } from '../../src/quant/pack.ts';
import type { NBitsTensor, QuantizedTensor } from '../../src/quant/types.ts';
import type { AttentionEngine, KvCache, MultiHeadAttention, MultiHeadAttentionConfig, QuantizedStateDict } from '../../src/index.ts';
import { mulberry32, randomStateDict } from '../../test/helpers/random.ts';

/** The weight types the benchmark knows: float ones (f16 is WebGPU's precision 'f16'), then the packed ones. */
export const BENCH_TYPES = ['f32', 'f16', 'q4_0', 'q4_k', 'q8_0', 'q6_k', 'nbits4', 'nbits8'] as const;

/** Random blocks of a GGUF type for [rows, K], with f16 scales of ±2⁻¹⁰…2⁻⁹. */
export function ggufBlocks(dtype: keyof typeof GGUF_BLOCKS, rows: number, K: number, rng: () => number): QuantizedTensor {
  const { bytes, weights } = GGUF_BLOCKS[dtype];
  const blocks = (rows * K) / weights;
  const data = new Uint8Array(blocks * bytes);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rng() * 256);
  const at = { q4_0: [0], q8_0: [0], q4_k: [0, 2], q6_k: [208] }[dtype];
  // f16 bits of ±2⁻¹⁰…2⁻⁹: weights of a few hundredths, as in real layers
  for (let b = 0; b < blocks; b++)
    for (const o of at) new DataView(data.buffer).setUint16(b * bytes + o, (rng() < 0.5 ? 0x8000 : 0) | (0x15 << 10) | Math.floor(rng() * 1024), true);
  return { dtype, shape: [rows, K], data };
}

/** Random MatMulNBits weights [rows, K] in blocks of 32, float32 scales of 0.002–0.003, the default zero points. */
export function nbits(bits: 4 | 8, rows: number, K: number, rng: () => number): NBitsTensor {
  const blockSize = 32;
  const blocks = Math.ceil(K / blockSize);
  const data = new Uint8Array((rows * blocks * blockSize * bits) / 8);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rng() * 256);
  const scales = Float32Array.from({ length: rows * blocks }, () => 0.002 + 0.001 * rng());
  const zeroPoints = new Uint8Array(rows * Math.ceil((blocks * bits) / 8)).fill(bits === 4 ? 0x88 : 128);
  return { dtype: 'nbits', bits, blockSize, shape: [rows, K], data, scales, zeroPoints };
}

function weightOf(type: string, rows: number, K: number, rng: () => number): QuantizedTensor {
  if (type === 'nbits4' || type === 'nbits8') return nbits(type === 'nbits4' ? 4 : 8, rows, K, rng);
  return ggufBlocks(type as keyof typeof GGUF_BLOCKS, rows, K, rng);
}

/** The layer's state_dict with its projection weights of `type` (float ones for f32 and f16). */
export function benchStateDict(config: Required<Pick<MultiHeadAttentionConfig, 'embedDim' | 'numHeads' | 'numKvHeads'>>, type: string): QuantizedStateDict {
  const float = randomStateDict(config, 1);
  if (type === 'f32' || type === 'f16') return float;
  const { embedDim: E, numHeads: H, numKvHeads: G } = config;
  const N = (H + 2 * G) * (E / H);
  const rng = mulberry32(7);
  return { ...float, in_proj_weight: weightOf(type, N, E, rng), 'out_proj.weight': weightOf(type, E, E, rng) };
}

/** A decode step's four projections as ONNX Runtime's MatMulNBits weights (4 bits, blocks of 32): q, k, v, o. */
export function ortProjectionWeights(E: number, H: number, G: number): [string, NBitsTensor][] {
  const Dh = E / H;
  const rng = mulberry32(9);
  return [
    ['q', nbits(4, H * Dh, E, rng)],
    ['k', nbits(4, G * Dh, E, rng)],
    ['v', nbits(4, G * Dh, E, rng)],
    ['o', nbits(4, E, E, rng)],
  ];
}

/** One weight type's layer in a decode-step benchmark, and what its steps measured (ms). */
export interface BenchEntry {
  type: string;
  engine: AttentionEngine;
  mha: MultiHeadAttention;
  cache: KvCache;
  steps: number[];
  /** The projections' GPU time of each step, where the engine profiles (WebGPU with timestamp-query). */
  projection: number[];
}
