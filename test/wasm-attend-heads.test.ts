// wasm/attention.ts's attendHeads: a decode step's query heads of one key/value head taken together as
// attend's rows (each K and V block read once for the group). It must give, bit for bit, what attend
// gives for each head alone (one row at the last position), under every part of the score rule that is
// the same for the group's heads (causal, window, key padding, a shared attnMask row, softcap, scale,
// head scale); the layer sends it only such groups (src/wasm/attention.ts), and the engine-level decode
// tests (wasm-kv-cache, wasm-quant) check the whole step against the float64 reference.

import { describe, expect, test } from 'vitest';
import { mulberry32, uniform } from './helpers/random.ts';
import { floatToHalfBits } from '../src/util/f16.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';

const SCRATCH_ROWS = 32; // attend's RG
const KEYS = 64; // attend's BC

interface Rule {
  causal?: boolean;
  window?: number;
  softcap?: number;
  padded?: boolean;
  masked?: boolean;
  headScale?: number;
}

const rules: [string, Rule][] = [
  ['no mask', {}],
  ['causal', { causal: true }],
  ['causal, window 37', { causal: true, window: 37 }],
  ['key padding (every third key)', { padded: true }],
  ['attnMask row (−∞ and finite values)', { masked: true }],
  ['softcap 5, head scale 0.5', { softcap: 5, headScale: 0.5 }],
];

describe('attendHeads gives, bit for bit, attend per head', () => {
  // heads per key/value head: 2 (half a quad), 4 (one quad), 5 (a quad and a lone row), 7; Skv 1, 63, 65
  // (a partial second block), 130; Dh 15 (no whole 4 at the end), 64.
  const shapes = [
    [2, 1, 64],
    [4, 63, 15],
    [5, 65, 64],
    [7, 130, 15],
    [4, 200, 64],
  ] as const;
  test.each(rules.flatMap(([name, rule]) => shapes.map((s) => [name, rule, ...s] as const)))('%s, %i heads, Skv=%i, Dh=%i', async (_name, rule, heads, Skv, Dh) => {
    const kernels = new WasmKernels(await compileKernels('single'));
    const k = kernels.k;
    const r = mulberry32(heads * 1000 + Skv + Dh);
    const q = kernels.put(uniform(heads * Dh, 1, r)); // [heads, Dh]: one row of each head
    const keys = kernels.put(uniform(Skv * Dh, 1, r));
    const v = kernels.put(uniform(Skv * Dh, 1, r));
    const kt = kernels.alloc(Math.ceil(Skv / KEYS) * KEYS * Dh);
    k.transpose(keys, Dh, Skv, Dh, kt);
    const pad = rule.padded ? kernels.putBytes(Uint8Array.from({ length: Skv }, (_, j) => (j % 3 === 1 ? 1 : 0))) : 0;
    const maskRow = Float32Array.from(uniform(Skv, 2, r), (x, j) => (j % 5 === 2 ? -Infinity : x));
    const mask = rule.masked ? kernels.put(maskRow) : 0;
    k.setRule(1 / Math.sqrt(Dh), rule.softcap ?? 0, 0, 0, 0, rule.headScale ?? 1, rule.causal ? 1 : 0, rule.window ?? 0, pad, mask, 0, 0, 0, 0, 0);
    const scratch = kernels.alloc(SCRATCH_ROWS * (KEYS + Dh + 3 + 5));
    const together = kernels.alloc(heads * Dh);
    const alone = kernels.alloc(heads * Dh);
    k.attendHeads(q, Dh, kt, v, Dh, together, Dh, heads, Skv, Dh, scratch);
    for (let h = 0; h < heads; h++) k.attend(q + 4 * h * Dh, Dh, kt, v, Dh, alone + 4 * h * Dh, Dh, 1, Skv, Dh, 0, scratch);
    const [got, want] = [kernels.take(together, heads * Dh), kernels.take(alone, heads * Dh)];
    expect(want.some((x) => x !== 0) || Skv === 1, 'attend per head gives something to compare with').toBe(true);
    expect(Array.from(got)).toEqual(Array.from(want));
    // attend keeps working on several rows at their own positions afterwards (the flag is reset): under a
    // causal rule, its row 0 (position Skv − rows) is a lone row over the first Skv − rows + 1 keys.
    if (!rule.causal || rule.masked) return;
    const rows = Math.min(heads, Skv);
    const [after, single] = [kernels.alloc(rows * Dh), kernels.alloc(Dh)];
    k.attend(q, Dh, kt, v, Dh, after, Dh, rows, Skv, Dh, 0, scratch);
    k.attend(q, Dh, kt, v, Dh, single, Dh, 1, Skv - rows + 1, Dh, 0, scratch); // row 0 at position Skv − rows
    expect(Array.from(kernels.take(after, Dh))).toEqual(Array.from(kernels.take(single, Dh)));
  });
});

describe('an f16 cache: 1 … 4 heads of a key/value head read the halves where they are (scores1Half, pv1Half, scores4Half, pv4Half) and give the bits of decoding each block first', () => {
  // 5 heads take the decoded tile (a quad and a lone row: wasm/attention.ts decodes a block for more
  // than one quad); their first rows are the same query rows, so they must equal the 1 … 4 heads' bit for
  // bit. Skv 70 (a partial second block), 200; Dh 32, 64, 128 (the widened path needs Dh % 8 = 0) and 36
  // (the tile either way: the control). ±∞ and NaN among the keys and values take the exact conversion.
  const shapes = [
    [1, 70, 32],
    [1, 200, 128],
    [1, 130, 40],
    [2, 70, 32],
    [3, 200, 64],
    [4, 200, 128],
    [4, 70, 36],
  ] as const;
  // finite 1: the cache holds no ±∞ or NaN (WasmKvCache's writes checked), and the f16 forms skip their check.
  test.each(shapes.flatMap((s) => [[false, 0] as const, [false, 1] as const, [true, 0] as const].map(([specials, finite]) => [...s, specials, finite] as const)))(
    '%i heads, Skv=%i, Dh=%i, specials %s, finite %i',
    async (heads, Skv, Dh, specials, finite) => {
      const kernels = new WasmKernels(await compileKernels('single'));
      const k = kernels.k;
      const r = mulberry32(heads * 1000 + Skv + Dh);
      const queries = uniform(5 * Dh, 1, r); // [5, Dh]
      queries[5] = -0.5; // row 0 scores key 3 (below) −∞: its other columns stay finite
      const q = kernels.put(queries);
      const keys = uniform(Skv * Dh, 1, r);
      const values = uniform(Skv * Dh, 1, r);
      if (specials) {
        keys[3 * Dh + 5] = Number.POSITIVE_INFINITY; // key 3: its scores ±∞ or NaN; the rows see it
        values[(Skv - 2) * Dh + 1] = Number.NaN;
        values[7 * Dh] = Number.NEGATIVE_INFINITY;
      }
      // The cache's kind 1 layout: Kᵀ [⌈Skv/64⌉, Dh, 64] and V [Skv, Dh], f16 bits (zero past Skv).
      const blocks = Math.ceil(Skv / KEYS);
      const kt16 = new Uint16Array(blocks * Dh * KEYS);
      for (let j = 0; j < Skv; j++) for (let d = 0; d < Dh; d++) kt16[((j >> 6) * Dh + d) * KEYS + (j & 63)] = floatToHalfBits(keys[j * Dh + d]);
      const v16 = Uint16Array.from(values, floatToHalfBits);
      const kt = kernels.putBytes(new Uint8Array(kt16.buffer));
      const v = kernels.putBytes(new Uint8Array(v16.buffer));
      const dec = kernels.alloc(128 * Dh);
      k.setRule(1 / Math.sqrt(Dh), 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 2 * Dh, dec, finite);
      const scratch = kernels.alloc(SCRATCH_ROWS * (KEYS + Dh + 3 + 5));
      const [widened, decoded] = [kernels.alloc(heads * Dh), kernels.alloc(5 * Dh)];
      k.attendHeads(q, Dh, kt, v, 0, widened, Dh, heads, Skv, Dh, scratch);
      k.attendHeads(q, Dh, kt, v, 0, decoded, Dh, 5, Skv, Dh, scratch);
      const [got, want] = [kernels.take(widened, heads * Dh), kernels.take(decoded, heads * Dh)];
      expect(
        want.some((x) => x !== 0 && Number.isFinite(x)),
        'something finite to compare',
      ).toBe(true);
      if (specials)
        expect(
          want.some((x) => !Number.isFinite(x)),
          'the specials reach the output',
        ).toBe(true);
      expect(Array.from(got).map(String)).toEqual(Array.from(want).map(String)); // NaN equals NaN here
    },
  );
});
