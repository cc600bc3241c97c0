// wasm/rotary.ts's kernel (src/wasm/rotary.ts rotateInKernels): rotary position embeddings of every head
// of token-major rows, as cpu/head-transform.ts's transformHead turns them in JavaScript, bit for bit
// (both in float64, rounded to float32 once). Every kind of rotary the plan resolves: half-split and
// interleaved pairs, a partial dim (an odd number of pairs: the kernel's two-pair step and its tail),
// given invFreq, attentionFactor, given cos/sin tables; query and key heads of different counts; rows at
// their own positions. Then: a layer with QK-norm is left to the JavaScript (the function says so).

import { describe, expect, test } from 'vitest';
import { transformHead } from '../src/cpu/head-transform.ts';
import type { LayerSpec } from '../src/plan/index.ts';
import { resolveQkNorm, resolveRotary, rotaryAngles } from '../src/plan/head-transform.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { rotateInKernels } from '../src/wasm/rotary.ts';
import { mulberry32, uniform } from './helpers/random.ts';

const Dh = 24;
const positions = [0, 1, 7, 300, 4095];

const rotaries: [string, Record<string, unknown>][] = [
  ['half-split, full dim', {}],
  ['interleaved', { interleaved: true }],
  ['partial dim 20 (10 pairs)', { dim: 20 }],
  ['partial dim 6 (3 pairs: the tail)', { dim: 6, base: 500000 }],
  ['interleaved, partial dim 14', { dim: 14, interleaved: true }],
  ['invFreq and attentionFactor (YaRN-style)', { invFreq: Float64Array.from({ length: 12 }, (_, i) => 0.9 ** i / 3), attentionFactor: 1.17 }],
  [
    'given cos/sin tables',
    {
      cos: Float32Array.from({ length: 4096 * 12 }, (_, i) => Math.cos(i * 0.37)),
      sin: Float32Array.from({ length: 4096 * 12 }, (_, i) => Math.sin(i * 0.37)),
    },
  ],
];

describe('the rotary kernel turns heads as transformHead does, bit for bit', () => {
  test.each(rotaries)('%s', async (_name, config) => {
    const rotary = resolveRotary('test', config, Dh)!;
    const spec = { rotary, qkNorm: null, headDim: Dh } as unknown as LayerSpec;
    const kernels = new WasmKernels(await compileKernels('single'));
    const rows = positions.length;
    const [H, G] = [5, 2];
    const q = uniform(rows * H * Dh, 3, mulberry32(1));
    q[7] = -0; // a signed zero and a large value keep their bits
    q[30] = 1e30;
    const k = uniform(rows * G * Dh, 3, mulberry32(2));
    const [qp, kp] = [kernels.put(q), kernels.put(k)];
    expect(
      rotateInKernels(kernels, spec, positions, [
        [qp, H],
        [kp, G],
      ]),
    ).toBe(true);
    for (const [x, heads] of [
      [q, H],
      [k, G],
    ] as const) {
      const angles = new Float64Array(rotary.dim);
      for (let m = 0; m < rows; m++) {
        rotaryAngles(rotary, positions[m], angles);
        for (let h = 0; h < heads; h++) transformHead(spec, x, (m * heads + h) * Dh, heads === H ? 'query' : 'key', angles);
      }
    }
    expect(Array.from(kernels.take(qp, q.length)).map((v) => (Object.is(v, -0) ? '-0' : v))).toEqual(Array.from(q).map((v) => (Object.is(v, -0) ? '-0' : v)));
    expect(Array.from(kernels.take(kp, k.length))).toEqual(Array.from(k));
    expect(q.some((v, i) => v !== uniform(rows * H * Dh, 3, mulberry32(1))[i])).toBe(true); // the heads were turned
  });

  test('a layer with QK-norm, or without rotary, is left to the JavaScript: false, nothing written', async () => {
    const kernels = new WasmKernels(await compileKernels('single'));
    const x = uniform(2 * Dh, 1, mulberry32(3));
    const p = kernels.put(x);
    const rotary = resolveRotary('test', {}, Dh)!;
    const qkNorm = resolveQkNorm('test', { query: new Float32Array(Dh).fill(1), key: new Float32Array(Dh).fill(1) }, Dh, 2, 2);
    for (const spec of [
      { rotary, qkNorm, headDim: Dh },
      { rotary: null, qkNorm: null, headDim: Dh },
    ] as unknown as LayerSpec[]) {
      expect(rotateInKernels(kernels, spec, [3], [[p, 2]])).toBe(false);
      expect(Array.from(kernels.take(p, 2 * Dh))).toEqual(Array.from(x));
    }
  });
});
