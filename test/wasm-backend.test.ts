// The 'wasm' backend (float32, WebAssembly SIMD) against the float64 CPU backend, over a grid of
// shapes that no tile divides: S = 1, 2, 7, 33, 100 (the attention's tiles are 4 rows × 64 keys,
// the GEMM's 4 rows × 8 columns), head sizes 1 … 256 (odd ones included: the kernels' f32x4 loops
// have scalar tails), grouped-query and multi-query layers, with and without bias, causal or not.
// The masks, score options, cross-attention, packed batches and needWeights: wasm-options.test.ts.

import { describe, expect, test } from 'vitest';
import { mulberry32, randomStateDict, uniform } from '../src/util/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';

interface LayerCase {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  bias?: boolean;
}

const layers: LayerCase[] = [
  { embedDim: 3, numHeads: 3 }, // Dh 1
  { embedDim: 6, numHeads: 2, bias: false }, // Dh 3, no bias
  { embedDim: 4, numHeads: 1 }, // Dh 4
  { embedDim: 14, numHeads: 2 }, // Dh 7
  { embedDim: 40, numHeads: 2 }, // Dh 20
  { embedDim: 132, numHeads: 3 }, // Dh 44
  { embedDim: 128, numHeads: 2 }, // Dh 64
  { embedDim: 254, numHeads: 2 }, // Dh 127
  { embedDim: 256, numHeads: 1 }, // Dh 256
  { embedDim: 64, numHeads: 8, numKvHeads: 2 }, // grouped-query: 4 query heads per key/value head
  { embedDim: 60, numHeads: 4, numKvHeads: 1 }, // multi-query, Dh 15
];

const shapes: [number, number][] = [
  [1, 1],
  [3, 1],
  [2, 2],
  [1, 7],
  [3, 33],
  [1, 100],
];

const engines = useEngines('wasm', 'cpu');

function caseName(l: LayerCase): string {
  return `E=${l.embedDim} H=${l.numHeads}${l.numKvHeads ? ` G=${l.numKvHeads}` : ''} Dh=${l.embedDim / l.numHeads}${l.bias === false ? ' no bias' : ''}`;
}

describe.each(layers)('wasm vs CPU reference, $embedDim/$numHeads', (l) => {
  test.each(shapes.flatMap(([B, S]) => [[B, S, false] as const, [B, S, true] as const]))(`${caseName(l)} B=%i S=%i causal=%s`, async (B, S, isCausal) => {
    const seed = 1000 * l.embedDim + 10 * S + B;
    const sd = randomStateDict(l, seed);
    const query = uniform(B * S * l.embedDim, 1, mulberry32(seed + 1));
    const wasm = engines.wasm.createMultiHeadAttention(l, sd);
    const cpu = engines.cpu.createMultiHeadAttention(l, sd);
    try {
      const { output } = await wasm.forward(query, { batchSize: B, seqLen: S, isCausal });
      const ref = await cpu.forward(query, { batchSize: B, seqLen: S, isCausal });
      expect(output.length).toBe(B * S * l.embedDim);
      expectClose(output, ref.output, f32Tolerance([l.embedDim, S, l.embedDim]), `${caseName(l)} B=${B} S=${S}${isCausal ? ' causal' : ''}`);
    } finally {
      wasm.dispose();
      cpu.dispose();
    }
  });
});

describe('wasm vs CPU reference, long sequences (several 64-key blocks per row)', () => {
  test.each([
    [1, 257, true],
    [2, 300, false],
  ] as const)('E=64 H=2 B=%i S=%i causal=%s', async (B, S, isCausal) => {
    const l = { embedDim: 64, numHeads: 2 };
    const sd = randomStateDict(l, S);
    const query = uniform(B * S * 64, 1, mulberry32(S + 1));
    const wasm = engines.wasm.createMultiHeadAttention(l, sd);
    const cpu = engines.cpu.createMultiHeadAttention(l, sd);
    try {
      const { output } = await wasm.forward(query, { batchSize: B, seqLen: S, isCausal });
      const ref = await cpu.forward(query, { batchSize: B, seqLen: S, isCausal });
      expectClose(output, ref.output, f32Tolerance([64, S, 64]), `E=64 H=2 B=${B} S=${S}`);
    } finally {
      wasm.dispose();
      cpu.dispose();
    }
  });
});

test("engine.backend is 'wasm', in float32, with nothing held on a GPU", () => {
  expect(engines.wasm.backend).toBe('wasm');
  expect(engines.wasm.precision).toBe('f32');
  expect(engines.wasm.adapterInfo).toBeNull();
  expect(engines.wasm.device).toBeNull();
  expect(engines.wasm.tuning).toBeNull();
  expect(engines.wasm.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
});
