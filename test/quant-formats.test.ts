// The quantized formats on the host (src/quant/): dequantize() against an independent numpy oracle of
// ggml's dequantize_row_* and ONNX Runtime's MatMulNBits (scripts/make_quant_fixtures.py), bit for bit;
// the packed layout the kernels read (packWeight / unpackWeight) against dequantize(); decodeRow's
// bit layout on hand-made blocks; checkQuantized's errors through createMultiHeadAttention; and
// quantizeWeights (its bytes against numpy's transcription of ggml's reference quantizers for q4_0,
// q8_0, q4_K, q6_K; round to nearest on every type; its errors). CPU only.

import { describe, expect, test } from 'vitest';
import {
  createAttentionEngine,
  dequantize,
  InvalidArgumentError,
  type NBitsTensor,
  type QuantizedTensor,
  quantizeWeights,
  ShapeMismatchError,
  UnsupportedError,
} from '../src/index.ts';
import { decodeRow, packedGeometry, packWeight, unpackWeight } from '../src/quant/pack.ts';
import { floatToHalfBits, halfToFloat } from '../src/util/f16.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';

interface DequantCase {
  name: string;
  dtype: QuantizedTensor['dtype'];
  shape: [number, number];
  bits?: 4 | 8;
  blockSize?: NBitsTensor['blockSize'];
  data: string;
  scales?: string;
  scalesType?: 'f32' | 'f16';
  zeroPoints?: string;
  expected: string;
}
interface QuantCase {
  name: string;
  dtype: 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k';
  shape: [number, number];
  input: string;
  data: string;
}

const REGENERATE = 'Regenerate them with `python3 scripts/make_quant_fixtures.py` (numpy).';
const set = loadJsonFixtures<{ cases: unknown[] }>(new URL('./fixtures/quant/', import.meta.url), REGENERATE, ['dequantize', 'quantize']);
const dequantCases = (set.fixtures.find((f) => f.name === 'dequantize')?.cases ?? []) as DequantCase[];
const quantCases = (set.fixtures.find((f) => f.name === 'quantize')?.cases ?? []) as QuantCase[];

const bytes = (b64: string) => new Uint8Array(Buffer.from(b64, 'base64'));
const f32 = (b64: string) => {
  const b = bytes(b64);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};

function tensorOf(c: DequantCase): QuantizedTensor {
  if (c.dtype !== 'nbits') return { dtype: c.dtype, shape: c.shape, data: bytes(c.data) };
  const s = bytes(c.scales as string);
  const scales = c.scalesType === 'f16' ? new Uint16Array(s.buffer, s.byteOffset, s.byteLength / 2) : new Float32Array(s.buffer, s.byteOffset, s.byteLength / 4);
  return {
    dtype: 'nbits',
    bits: c.bits as 4 | 8,
    blockSize: c.blockSize as NBitsTensor['blockSize'],
    shape: c.shape,
    data: bytes(c.data),
    scales,
    ...(c.zeroPoints ? { zeroPoints: bytes(c.zeroPoints) } : {}),
  };
}

/** The (scale, offset, zero) of every group of every row, as decodeRow reports them. */
function groupsOf(t: QuantizedTensor): { scale: number; offset: number; zero?: number }[][] {
  return Array.from({ length: t.shape[0] }, (_, n) => {
    const g: { scale: number; offset: number; zero?: number }[] = [];
    decodeRow(
      t,
      n,
      () => {},
      (i, scale, offset, zero) => {
        g[i] = { scale, offset, zero };
      },
    );
    return g;
  });
}

test('the numpy fixtures are present', () => {
  expectFixturesPresent(set);
  expect(dequantCases.length).toBeGreaterThan(10);
  expect(quantCases.length).toBeGreaterThan(0);
});

describe.each(dequantCases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
  test('dequantize() equals numpy bit for bit', () => {
    const got = dequantize(tensorOf(c));
    const want = f32(c.expected);
    expect(got.length).toBe(want.length);
    const [g, w] = [new Uint32Array(got.buffer), new Uint32Array(want.buffer.slice(want.byteOffset, want.byteOffset + want.byteLength))];
    const bad = g.findIndex((v, i) => v !== w[i]);
    expect(bad, bad >= 0 ? `[${bad}] got ${got[bad]}, numpy ${want[bad]}` : '').toBe(-1);
  });

  test('packWeight + unpackWeight agrees with dequantize', () => {
    // unpack computes fl(fl(s·q) − o) with o = fl(s·z); dequantize fl((q − z)·s) (the format's own
    // order). Each of the ≤ 3 roundings is ≤ 2⁻²⁴ of a term of size ≤ |s|·qmax, and dequantize's own ≤
    // 2⁻²⁴·|s|·qmax: |a − b| ≤ 4·2⁻²⁴·|s|·qmax = 2⁻²²·|s|·qmax per group (qmax·|s|: the group's range).
    // q4_k has no integer zero: both sides are fl(fl(s·q) − o), identical.
    const t = tensorOf(c);
    const p = packWeight(t);
    const a = unpackWeight(p);
    const b = dequantize(t);
    const { bits, group } = packedGeometry(t);
    expect([p.bits, p.group, p.rows, p.cols, p.groups, p.wordsPerRow]).toEqual([
      bits,
      group,
      c.shape[0],
      c.shape[1],
      Math.ceil(c.shape[1] / group),
      Math.ceil((c.shape[1] * bits) / 32),
    ]);
    const groups = groupsOf(t);
    const qmax = levels(t);
    const [N, K] = c.shape;
    for (let n = 0; n < N; n++) {
      for (let k = 0; k < K; k++) {
        const { scale, zero } = groups[n][Math.floor(k / group)];
        const bound = zero === undefined ? 0 : 2 ** -22 * Math.abs(scale) * qmax;
        const err = Math.abs(a[n * K + k] - b[n * K + k]);
        if (!(err <= bound)) expect.fail(`[${n}, ${k}] unpacked ${a[n * K + k]}, dequantized ${b[n * K + k]}: |err| ${err} > ${bound}`);
      }
    }
  });
});

describe('decodeRow: the bit layout of each block', () => {
  /** put(k, q) of row 0 as an array [K], and the groups. */
  function decode(t: QuantizedTensor): { q: number[]; groups: [number, number, number, number | undefined][] } {
    const q = new Array(t.shape[1]).fill(-1);
    const groups: [number, number, number, number | undefined][] = [];
    decodeRow(
      t,
      0,
      (k, v) => {
        q[k] = v;
      },
      (g, s, o, z) => groups.push([g, s, o, z]),
    );
    return { q, groups };
  }
  const ONE = [0x00, 0x3c]; // f16 1.0, little-endian
  const TWO = [0x00, 0x40];

  test('q4_0: weight j in the low nibble of qs[j], weight j + 16 in its high nibble; w = (q − 8)·d', () => {
    const data = new Uint8Array([...TWO, ...Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4))]);
    const { q, groups } = decode({ dtype: 'q4_0', shape: [1, 32], data });
    expect(q).toEqual([...Array.from({ length: 16 }, (_, j) => j), ...Array.from({ length: 16 }, (_, j) => 15 - j)]);
    expect(groups).toEqual([[0, 2, 16, 8]]);
    expect(dequantize({ dtype: 'q4_0', shape: [1, 32], data })[0]).toBe(-16);
  });

  test('q8_0: int8 weights stored unsigned as q + 128', () => {
    const data = new Uint8Array([...ONE, ...Int8Array.from({ length: 32 }, (_, j) => j * 8 - 128).map((v) => v & 0xff)]);
    const { q, groups } = decode({ dtype: 'q8_0', shape: [1, 32], data });
    expect(q).toEqual(Array.from({ length: 32 }, (_, j) => j * 8));
    expect(groups).toEqual([[0, 1, 128, 128]]);
  });

  test('q4_k: 4 chunks of 64 (32 low nibbles, then 32 high), 6-bit scales and mins per 32', () => {
    const data = new Uint8Array(144);
    data.set(ONE, 0); // d = 1
    data.set(TWO, 2); // dmin = 2
    // sub-block 1: scale 5, min 7 (bytes 1 and 5); sub-block 6: scale 0x2a = (0xa | 2 << 4), min 0x13 = (3 | 1 << 4)
    data[4 + 1] = 5;
    data[4 + 5] = 7;
    data[4 + 10] = 0x3a; // j = 6: scales[j + 4] = low 4 bits of scale | low 4 bits of min << 4
    data[4 + 2] = 2 << 6; // scales[j − 4] high bits: scale >> 4
    data[4 + 6] = 1 << 6; // scales[j] high bits: min >> 4
    data[16 + 32 * 3 + 9] = 0xc4; // chunk 3, byte 9: weight 192 + 9 = 4, weight 192 + 32 + 9 = 12
    const { q, groups } = decode({ dtype: 'q4_k', shape: [1, 256], data });
    const nonzero = q.flatMap((v, k) => (v ? [[k, v]] : []));
    expect(nonzero).toEqual([
      [201, 4],
      [233, 12],
    ]);
    expect(groups[1]).toEqual([1, 5, 14, undefined]);
    expect(groups[6]).toEqual([6, 0x2a, 2 * 0x13, undefined]);
  });

  test('q6_k: low 4 bits in ql, high 2 in qh, int8 scales per 16, d last', () => {
    const data = new Uint8Array(210);
    data.set(ONE, 208);
    data[192 + 14] = 0xfd; // scale of sub-block 14 = −3
    data[64 + 32 + 5] = 0x30; // half 1, ql[l + 32] high nibble (i = 3), l = 5: low bits 3
    data[128 + 32 + 5] = 0b10 << 6; // qh[32 + 5] bits 6–7 (i = 3): high bits 2
    const { q, groups } = decode({ dtype: 'q6_k', shape: [1, 256], data });
    const odd = q.flatMap((v, k) => (v ? [[k, v]] : []));
    expect(odd).toEqual([[128 + 96 + 5, 3 | (2 << 4)]]);
    expect(groups[14]).toEqual([14, -3, -96, 32]);
    expect(dequantize({ dtype: 'q6_k', shape: [1, 256], data })[229]).toBe((35 - 32) * -3);
  });

  test('nbits: low nibble first, packed zero points (low nibble first), a partial last block', () => {
    const t: NBitsTensor = {
      dtype: 'nbits',
      bits: 4,
      blockSize: 16,
      shape: [1, 20],
      data: new Uint8Array([...Array.from({ length: 8 }, (_, j) => (2 * j) | ((2 * j + 1) << 4)), 0x21, 0x43, 0, 0, 0, 0, 0, 0]),
      scales: new Float32Array([0.5, 2]),
      zeroPoints: new Uint8Array([0x93]),
    };
    const { q, groups } = decode(t);
    expect(q).toEqual([...Array.from({ length: 16 }, (_, j) => j), 1, 2, 3, 4]);
    expect(groups).toEqual([
      [0, 0.5, 1.5, 3],
      [1, 2, 18, 9],
    ]);
    expect(Array.from(dequantize(t).subarray(16))).toEqual([-16, -14, -12, -10]);
    // the packed words (types.ts PackedWeight): weight k is nibble k % 8 of word k / 8, low nibble first;
    // the row padded with zeros to whole words; (scale, offset) per group
    const p = packWeight(t);
    expect(Array.from(p.quants)).toEqual([0x76543210, 0xfedcba98, 0x4321]);
    expect(Array.from(p.scaleOffset)).toEqual([0.5, 1.5, 2, 18]);
  });

  test('packed 8-bit words: weight k is byte k % 4 of word k / 4 (q8_0 stored as q + 128)', () => {
    const data = new Uint8Array([...ONE, ...Int8Array.from({ length: 32 }, (_, j) => j - 128).map((v) => v & 0xff)]);
    const p = packWeight({ dtype: 'q8_0', shape: [1, 32], data });
    expect(p.quants[0]).toBe(0x03020100);
    expect(p.quants[7]).toBe(0x1f1e1d1c);
  });

  test("q4_0, q8_0, q4_k, q6_k: packWeight's block paths give decodeRow's words and (scale, offset) pairs, bit for bit", () => {
    // packWeight packs these formats a block at a time (packBlocks32, packQ4K, packQ6K), not a call per
    // weight: the same layout as decodeRow's put(k, q) into word k / perWord and group(g, scale, offset),
    // here rebuilt from decodeRow itself. Random bytes, every other block's f16 d (and q4_k's dmin) drawn
    // from every kind of half as well (±0, subnormals, the largest, ±∞, NaN).
    const SPECIAL = [0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3c00];
    const BLOCKS = { q4_0: [18, 32, [0]], q8_0: [34, 32, [0]], q4_k: [144, 256, [0, 2]], q6_k: [210, 256, [208]] } as const;
    for (const dtype of ['q4_0', 'q8_0', 'q4_k', 'q6_k'] as const) {
      const [blockBytes, weights, halves] = BLOCKS[dtype];
      const [N, K] = [5, 3 * weights];
      const rnd = mulberry32(blockBytes);
      const data = Uint8Array.from({ length: (N * K * blockBytes) / weights }, () => Math.floor(rnd() * 256));
      for (let s = 0; s < (N * K) / weights; s += 2) {
        for (const [i, at] of halves.entries()) {
          const h = SPECIAL[(s / 2 + i) % SPECIAL.length];
          data[s * blockBytes + at] = h & 0xff;
          data[s * blockBytes + at + 1] = h >> 8;
        }
      }
      const t: QuantizedTensor = { dtype, shape: [N, K], data };
      expectPackedAsDecoded(t, dtype);
    }
  });

  test("nbits: packWeight's row path gives decodeRow's words and pairs, bit for bit (partial blocks, zero points, f16 scales)", () => {
    // packNBits takes each row's quant bytes as they are (already in the packed order), 4 to a word, and gives each block its pair.
    const SPECIAL = [0x0000, 0x8000, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x3c00];
    const cases: [bits: 4 | 8, blockSize: NBitsTensor['blockSize'], K: number, zeros: boolean, f16: boolean][] = [
      [4, 32, 96, false, false],
      [4, 16, 41, true, true], // K odd: a last byte's low nibble alone
      [4, 128, 300, true, false],
      [8, 32, 70, true, true],
      [8, 64, 64, false, true],
    ];
    for (const [bits, blockSize, K, zeros, f16] of cases) {
      const N = 3;
      const blocks = Math.ceil(K / blockSize);
      const rnd = mulberry32(K);
      const byte = () => Math.floor(rnd() * 256);
      const t: NBitsTensor = {
        dtype: 'nbits',
        bits,
        blockSize,
        shape: [N, K],
        data: Uint8Array.from({ length: (N * blocks * blockSize * bits) / 8 }, byte),
        scales: f16
          ? Uint16Array.from({ length: N * blocks }, (_, i) => (i % 2 ? SPECIAL[(i >> 1) % SPECIAL.length] : floatToHalfBits(rnd() - 0.5)))
          : Float32Array.from({ length: N * blocks }, () => rnd() - 0.5),
        ...(zeros ? { zeroPoints: Uint8Array.from({ length: N * Math.ceil((blocks * bits) / 8) }, byte) } : {}),
      };
      expectPackedAsDecoded(t, `nbits ${bits} bits, blocks of ${blockSize}, K ${K}`);
    }
  });

  /** packWeight(t) against the packing rebuilt from decodeRow: words and (scale, offset) bits equal. */
  function expectPackedAsDecoded(t: QuantizedTensor, what: string): void {
    const p = packWeight(t);
    const [N] = t.shape;
    const { bits } = packedGeometry(t);
    const perWord = 32 / bits;
    const quants = new Uint32Array(p.quants.length);
    const scaleOffset = new Float32Array(p.scaleOffset.length);
    for (let n = 0; n < N; n++) {
      decodeRow(
        t,
        n,
        (k, q) => {
          quants[n * p.wordsPerRow + Math.floor(k / perWord)] |= q << (bits * (k % perWord));
        },
        (g, scale, offset) => {
          scaleOffset[2 * (n * p.groups + g)] = scale;
          scaleOffset[2 * (n * p.groups + g) + 1] = offset;
        },
      );
    }
    expect(Array.from(p.quants), what).toEqual(Array.from(quants));
    expect(Array.from(new Uint32Array(p.scaleOffset.buffer)), `${what}: scales and offsets`).toEqual(Array.from(new Uint32Array(scaleOffset.buffer)));
  }
});

describe('checkQuantized through createMultiHeadAttention (backend cpu)', () => {
  const config = { embedDim: 64, numHeads: 2 };
  const base = randomStateDict(config, 3);
  const good = quantizeWeights(base, { dtype: 'q4_0' });
  const q = good.in_proj_weight as QuantizedTensor;
  const nb = quantizeWeights(base, { dtype: 'nbits', bits: 4, blockSize: 32 }).in_proj_weight as NBitsTensor;
  const wide = { embedDim: 48, numHeads: 2 };
  const wideSd = randomStateDict(wide, 4);
  const cases: [string, object, Record<string, unknown>, new (...a: never[]) => Error, string][] = [
    [
      'data length wrong for the shape and type',
      config,
      { ...good, in_proj_weight: { ...q, data: q.data.subarray(1) } },
      ShapeMismatchError,
      'stateDict["in_proj_weight"].data',
    ],
    [
      'K not a multiple of 32 (q4_0)',
      wide,
      { ...wideSd, 'out_proj.weight': { dtype: 'q4_0', shape: [48, 48], data: new Uint8Array((48 * 48 * 18) / 32) } },
      UnsupportedError,
      'stateDict["out_proj.weight"].shape',
    ],
    [
      'K not a multiple of 256 (q4_k)',
      config,
      { ...good, in_proj_weight: { dtype: 'q4_k', shape: [192, 64], data: new Uint8Array(192 * 36) } },
      UnsupportedError,
      'stateDict["in_proj_weight"].shape',
    ],
    ['an unknown dtype', config, { ...good, in_proj_weight: { ...q, dtype: 'q5_k' } }, InvalidArgumentError, 'stateDict["in_proj_weight"].dtype'],
    ['bits other than 4 or 8', config, { ...good, in_proj_weight: { ...nb, bits: 3 } }, UnsupportedError, 'stateDict["in_proj_weight"].bits'],
    ['missing scales', config, { ...good, in_proj_weight: { ...nb, scales: undefined } }, InvalidArgumentError, 'stateDict["in_proj_weight"].scales'],
    ['wrong scales length', config, { ...good, in_proj_weight: { ...nb, scales: nb.scales.subarray(2) } }, ShapeMismatchError, 'stateDict["in_proj_weight"].scales'],
    [
      'wrong zeroPoints length',
      config,
      { ...good, in_proj_weight: { ...nb, zeroPoints: new Uint8Array(3) } },
      ShapeMismatchError,
      'stateDict["in_proj_weight"].zeroPoints',
    ],
    ['a shape that does not fit the layer', config, { ...good, 'out_proj.weight': good.in_proj_weight }, ShapeMismatchError, 'stateDict["out_proj.weight"].shape'],
  ];
  test.each(cases)('%s', async (_name, cfg, sd, ErrorClass, argument) => {
    const engine = await createAttentionEngine({ backend: 'cpu' });
    try {
      let thrown: unknown = null;
      try {
        engine.createMultiHeadAttention(cfg as typeof config, sd as never);
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(ErrorClass);
      expect((thrown as { argument: string }).argument).toBe(argument);
      expect((thrown as Error).message).toContain(argument);
    } finally {
      engine.dispose();
    }
  });
});

describe('quantizeWeights', () => {
  test.each(quantCases.map((c) => [c.name, c] as const))('%s: the bytes of ggml’s reference quantizer (numpy)', (_name, c) => {
    const [N, K] = c.shape;
    const sd = { in_proj_weight: f32(c.input), 'out_proj.weight': new Float32Array(K * K) };
    const t = quantizeWeights(sd, { dtype: c.dtype }).in_proj_weight as QuantizedTensor;
    expect(t.shape).toEqual([N, K]);
    expect(Buffer.from(t.data).toString('base64')).toBe(c.data);
  });

  const config = { embedDim: 256, numHeads: 4, numKvHeads: 2 };
  const sd = randomStateDict(config, 21);
  const variants: [string, Parameters<typeof quantizeWeights>[1]][] = [
    ['q4_0', { dtype: 'q4_0' }],
    ['q8_0', { dtype: 'q8_0' }],
    ['q4_k', { dtype: 'q4_k' }],
    ['q6_k', { dtype: 'q6_k' }],
    ['nbits 4', { dtype: 'nbits' }],
    ['nbits 8 f16 scales', { dtype: 'nbits', bits: 8, blockSize: 64, scales: 'f16' }],
    ['nbits 4 symmetric', { dtype: 'nbits', bits: 4, blockSize: 128, symmetric: true }],
  ];
  test.each(variants)('%s: every weight on the grid point nearest to it, biases unchanged', (_name, options) => {
    const out = quantizeWeights(sd, options);
    expect(out.in_proj_bias).toBe(sd.in_proj_bias);
    expect(out['out_proj.bias']).toBe(sd['out_proj.bias']);
    for (const name of ['in_proj_weight', 'out_proj.weight']) {
      const t = out[name] as QuantizedTensor;
      expect(t.dtype).toBe(options.dtype);
      expectNearest(sd[name], t, options);
    }
  });

  test('nbits with K not a multiple of blockSize (partial last block)', () => {
    const cfg = { embedDim: 40, numHeads: 2 };
    const s = randomStateDict(cfg, 5);
    for (const options of [
      { dtype: 'nbits', blockSize: 16 },
      { dtype: 'nbits', bits: 8, blockSize: 32, symmetric: true },
    ] as const) {
      const t = quantizeWeights(s, options).in_proj_weight as NBitsTensor;
      expect(t.shape).toEqual([120, 40]);
      expect(t.data.length).toBe(120 * Math.ceil(40 / options.blockSize) * ((options.blockSize * (t.bits as number)) / 8));
      expectNearest(s.in_proj_weight, t, options);
    }
  });

  test('options.config gives each weight its shape (kdim, vdim ≠ embedDim)', async () => {
    const cfg = { embedDim: 64, numHeads: 2, kdim: 32, vdim: 96 };
    const rng = mulberry32(8);
    const s = {
      q_proj_weight: uniform(64 * 64, 0.2, rng),
      k_proj_weight: uniform(64 * 32, 0.2, rng),
      v_proj_weight: uniform(64 * 96, 0.2, rng),
      in_proj_bias: uniform(192, 0.1, rng),
      'out_proj.weight': uniform(64 * 64, 0.2, rng),
      'out_proj.bias': uniform(64, 0.1, rng),
    };
    const out = quantizeWeights(s, { dtype: 'q8_0', config: cfg });
    expect(['q_proj_weight', 'k_proj_weight', 'v_proj_weight', 'out_proj.weight'].map((n) => (out[n] as QuantizedTensor).shape)).toEqual([
      [64, 64],
      [64, 32],
      [64, 96],
      [64, 64],
    ]);
    const engine = await createAttentionEngine({ backend: 'cpu' });
    try {
      expect(() => engine.createMultiHeadAttention(cfg, out)).not.toThrow();
    } finally {
      engine.dispose();
    }
  });

  test('errors name the argument', () => {
    const cases: [() => unknown, new (...a: never[]) => Error, string][] = [
      [() => quantizeWeights(sd, { dtype: 'q5_k' as never }), InvalidArgumentError, 'options.dtype'],
      [() => quantizeWeights(randomStateDict({ embedDim: 48, numHeads: 2 }, 1), { dtype: 'q4_0' }), UnsupportedError, 'stateDict["in_proj_weight"]'],
      [() => quantizeWeights(randomStateDict({ embedDim: 64, numHeads: 2 }, 1), { dtype: 'q6_k' }), UnsupportedError, 'stateDict["in_proj_weight"]'],
      [() => quantizeWeights(sd, { dtype: 'nbits', blockSize: 48 }), InvalidArgumentError, 'options.blockSize'],
      [() => quantizeWeights(sd, { dtype: 'q4_0', blockSize: 64 }), InvalidArgumentError, 'options.blockSize'],
      [() => quantizeWeights(sd, { dtype: 'nbits', bits: 2 as never }), UnsupportedError, 'options.bits'],
      [() => quantizeWeights({ ...sd, in_proj_bias: [0.1] as never }, { dtype: 'q8_0' }), InvalidArgumentError, 'stateDict["in_proj_bias"]'],
      [() => quantizeWeights({ ...sd, in_proj_weight: new Float32Array(5) }, { dtype: 'q8_0' }), ShapeMismatchError, 'stateDict["in_proj_weight"]'],
      [() => quantizeWeights(sd, { dtype: 'q8_0', blocksize: 32 } as never), InvalidArgumentError, 'options.blocksize'],
    ];
    for (const [call, ErrorClass, argument] of cases) {
      let thrown: unknown = null;
      try {
        call();
      } catch (e) {
        thrown = e;
      }
      expect(thrown, argument).toBeInstanceOf(ErrorClass);
      expect((thrown as { argument: string }).argument).toBe(argument);
      expect((thrown as Error).message).toContain(argument);
    }
  });

  test('floatToHalfBits rounds to nearest even, and inverts halfToFloat', () => {
    const cases: [number, number][] = [
      [1, 0x3c00],
      [-2, 0xc000],
      [65504, 0x7bff],
      [65520, 0x7c00],
      [2 ** -24, 1],
      [2 ** -25, 0],
      [3 * 2 ** -25, 2],
      [1 + 2 ** -11, 0x3c00],
      [1 + 3 * 2 ** -11, 0x3c02],
      [2 ** -14 - 2 ** -25, 0x400],
    ];
    for (const [v, h] of cases) expect(floatToHalfBits(v), String(v)).toBe(h);
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00 && h & 0x3ff) continue; // NaN
      if (floatToHalfBits(halfToFloat(h)) !== h) expect.fail(`half 0x${h.toString(16)}`);
    }
  });
});

/**
 * Round to nearest, checked on the result: every weight w dequantizes to a point of its group's grid
 * {value(q) : q = 0 … 2^bits − 1} at most `slack` farther from w than the nearest grid point. The slack
 * covers what the reference quantizers do in float32: q4_0 / q8_0 pick q with id = 1/d before d is
 * rounded to float16 (each grid point moves by ≤ |q − z|·|d|·2⁻¹¹, so 2·max|q − z|·|d|·2⁻¹¹), nbits with
 * a rounded reciprocal (≤ 2⁻²²·|s|·qmax). And the brief's bound: |w − deq| ≤ |s|/2 (+ slack) where the
 * grid spans every weight (q8_0, asymmetric nbits); ≤ |s| where the clamp cuts one value (q4_0, symmetric nbits).
 */
function expectNearest(w: Float32Array, t: QuantizedTensor, options: { dtype: string; symmetric?: boolean; scales?: string }): void {
  const [N, K] = t.shape;
  const deq = dequantize(t);
  const { group } = packedGeometry(t);
  const groups = groupsOf(t);
  const qmax = levels(t);
  let worst = 0;
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const { scale, offset, zero } = groups[n][Math.floor(k / group)];
      const s = Math.abs(scale);
      const slack = options.dtype === 'q4_0' ? 16 * s * 2 ** -11 : options.dtype === 'q8_0' ? 256 * s * 2 ** -11 : 2 ** -20 * s * qmax;
      const value = (q: number) => (zero === undefined ? Math.fround(Math.fround(scale * q) - offset) : Math.fround((q - zero) * scale));
      // the grid is monotone in q: the nearest point is next to the ideal (unrounded) level, or an end
      const ideal = scale === 0 ? 0 : zero === undefined ? (w[n * K + k] + offset) / scale : w[n * K + k] / scale + zero;
      const c = Math.min(qmax, Math.max(0, Math.round(ideal)));
      let nearest = Number.POSITIVE_INFINITY;
      for (const q of [0, c - 1, c, c + 1, qmax]) if (q >= 0 && q <= qmax) nearest = Math.min(nearest, Math.abs(w[n * K + k] - value(q)));
      const err = Math.abs(w[n * K + k] - deq[n * K + k]);
      worst = Math.max(worst, err / (s || 1));
      if (!(err <= nearest + slack)) expect.fail(`[${n}, ${k}] w ${w[n * K + k]} → ${deq[n * K + k]}: |err| ${err} > nearest ${nearest} + ${slack}`);
      const half = options.dtype === 'q8_0' || (options.dtype === 'nbits' && !options.symmetric);
      // float16 scales: the grid, made for the unrounded scale, shrinks by ≤ qmax·|s|·2⁻¹¹ at its ends
      const edge = options.scales === 'f16' ? qmax * s * 2 ** -11 : 0;
      const bound = (half ? s / 2 : ['q4_0', 'nbits'].includes(options.dtype) ? s : Number.POSITIVE_INFINITY) + slack + edge;
      if (!(err <= bound)) expect.fail(`[${n}, ${k}] |err| ${err} > ${bound} (scale ${s})`);
    }
  }
  expect(worst).toBeLessThan(Number.POSITIVE_INFINITY);
}

/** The largest quant of a format's packed layout: 15 (4 bits), 63 (q6_k's 6 bits), 255 (8 bits). */
function levels(t: QuantizedTensor): number {
  return t.dtype === 'q6_k' ? 63 : 2 ** packedGeometry(t).bits - 1;
}
