// util/f16.ts, the package's one float32 ⇄ float16 conversion: its array forms agree with its scalar
// forms on every half bit pattern, whichever path (direct, or the table of all 65536) a length takes.
// The rounding itself is pinned in quant-formats.test.ts ('floatToHalfBits rounds to nearest even').

import { expect, test } from 'vitest';
import { floatToHalfBits, fromF16, halfBitsOfFloat32Bits, halfToFloat, toF16 } from '../src/util/f16.ts';

const same = (a: number, b: number) => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));

test('fromF16 equals halfToFloat on every half, short arrays (direct) and long ones (table)', () => {
  const short = Uint16Array.from([0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0xfe01]);
  expect(Array.from(fromF16(short))).toEqual([0, -0, 2 ** -24, 1023 * 2 ** -24, 2 ** -14, 1, 65504, Infinity, -Infinity, Number.NaN, Number.NaN]);
  const all = Uint16Array.from({ length: 0x10000 }, (_, h) => h);
  const values = fromF16(all);
  for (let h = 0; h < 0x10000; h++) if (!same(values[h], halfToFloat(h))) expect.fail(`half 0x${h.toString(16)}: ${values[h]} ≠ ${halfToFloat(h)}`);
  // after the table exists, a short array reads it and still agrees
  expect(Array.from(fromF16(short)).map((v, i) => same(v, halfToFloat(short[i])))).not.toContain(false);
});

test('toF16 equals floatToHalfBits, and round-trips every half that is not NaN', () => {
  const values = Float32Array.from([0, -0, 1e-8, -3e-8, 0.1, 65519, 65520, 1e6, -Infinity, Number.NaN]);
  expect(Array.from(toF16(values))).toEqual(Array.from(values, floatToHalfBits));
  expect(Array.from(toF16(values).slice(-2))).toEqual([0xfc00, 0x7e00]);
  const halves = Uint16Array.from({ length: 0x10000 }, (_, h) => h).filter((h) => (h & 0x7c00) !== 0x7c00 || !(h & 0x3ff));
  const back = toF16(fromF16(halves));
  for (let i = 0; i < halves.length; i++) if (back[i] !== halves[i]) expect.fail(`half 0x${halves[i].toString(16)} came back as 0x${back[i].toString(16)}`);
});

/** The half nearest to float32 `v` (ties to the even one; ±Infinity from 65520; NaN quiet), found by search among the halves' values: independent of f16.ts's bit arithmetic. */
function nearestHalf(v: number): number {
  const sign = v < 0 || Object.is(v, -0) ? 0x8000 : 0;
  if (Number.isNaN(v)) return 0x7e00; // the sign of a NaN is not pinned here
  const m = Math.abs(v);
  if (m >= 65520) return sign | 0x7c00;
  let lo = 0; // the largest h with halfToFloat(h) ≤ m
  let hi = 0x7bff;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (halfToFloat(mid) <= m) lo = mid;
    else hi = mid - 1;
  }
  if (lo === 0x7bff) return sign | lo;
  const below = m - halfToFloat(lo);
  const above = halfToFloat(lo + 1) - m;
  return sign | (below < above || (below === above && (lo & 1) === 0) ? lo : lo + 1);
}

test('halfBitsOfFloat32Bits (the normal range in one step, the rest by cases) rounds every tie, its neighbours and a spread of float32s as a search over the halves does', () => {
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const check = (bits: number) => {
    u[0] = bits;
    const v = f[0];
    const got = halfBitsOfFloat32Bits(bits);
    const want = nearestHalf(v);
    if (Number.isNaN(v) ? (got & 0x7fff) !== 0x7e00 : got !== want)
      expect.fail(`float32 0x${(bits >>> 0).toString(16)} (${v}): 0x${got.toString(16)}, want 0x${want.toString(16)}`);
    if (!Number.isNaN(v)) expect(floatToHalfBits(v)).toBe(got);
  };
  // Every tie between neighbouring halves (the midpoints are float32s), one float32 ulp each side, both signs.
  for (let h = 0; h < 0x7bff; h++) {
    f[0] = (halfToFloat(h) + halfToFloat(h + 1)) / 2;
    const tie = u[0];
    for (const bits of [tie - 1, tie, tie + 1]) for (const s of [0, 0x80000000]) check((bits | s) >>> 0);
  }
  // The edges of the one-step range, Infinity, NaN, zeros, subnormal float32s, and a stride over all patterns.
  for (const bits of [
    0x38800000, 0x387fffff, 0x477fefff, 0x477ff000, 0x477ff001, 0x7f800000, 0x7fc00000, 0x7f800001, 0, 1, 0x007fffff, 0x33000000, 0x33000001, 0x32ffffff,
  ]) {
    check(bits);
    check((bits | 0x80000000) >>> 0);
  }
  for (let bits = 0; bits < 2 ** 32; bits += 65521) check(bits);
});

test("the 'wasm' backend's toHalves (wasm/halves.ts, an f16 cache's writes) gives halfBitsOfFloat32Bits's bits: every exponent and sign with the rounding's edge mantissas, and random floats", async () => {
  const { compileKernels, WasmKernels } = await import('../src/wasm/kernels.ts');
  for (const build of ['auto', 'simd128'] as const) {
    const kernels = new WasmKernels(await compileKernels('single', build === 'auto' ? undefined : build));
    // The high 16 bits: every sign and exponent with some mantissa tops; the low bits: the round-half
    // boundary (0x1000 of the 13 dropped), its neighbours, and the subnormal shifts' boundaries.
    const lows = [0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x5000, 0x7fff, 0x8000, 0xc000, 0xffff];
    const inputs: number[] = [];
    for (let hi = 0; hi < 0x10000; hi += hi < 0x3000 || hi >= 0x4800 ? 7 : 1) for (const lo of lows) inputs.push(((hi << 16) | lo) >>> 0);
    const r = (() => {
      let s = 12345;
      return () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0);
    })();
    for (let i = 0; i < 200000; i++) inputs.push(r());
    const Dh = 4099; // not a multiple of 4: the tail one at a time too
    const k = kernels.alloc(Dh);
    const v = kernels.alloc(Dh);
    const kt = kernels.alloc(32 * Dh); // a column: one half every 128 bytes
    const vo = kernels.alloc(Math.ceil(Dh / 2));
    const scratch = kernels.alloc(4);
    for (let at = 0; at < inputs.length; at += Dh) {
      const n = Math.min(Dh, inputs.length - at);
      const bits = new Uint32Array(Dh);
      bits.set(inputs.slice(at, at + n));
      const rev = bits.slice().reverse(); // V: the same values in another order (other lanes together)
      new Uint32Array(kernels.memory.buffer, k, Dh).set(bits);
      new Uint32Array(kernels.memory.buffer, v, Dh).set(rev);
      const special = kernels.k.toHalves(k, kt, 128, v, vo, Dh, scratch);
      const u16 = new Uint16Array(kernels.memory.buffer);
      let any = false;
      for (let d = 0; d < Dh; d++) {
        const [wk, wv] = [halfBitsOfFloat32Bits(bits[d]), halfBitsOfFloat32Bits(rev[d])];
        const [gk, gv] = [u16[(kt + 128 * d) >> 1], u16[(vo >> 1) + d]];
        if (gk !== wk || gv !== wv)
          expect.fail(
            `${build}: 0x${bits[d].toString(16)} → K 0x${gk.toString(16)}, V of 0x${rev[d].toString(16)} → 0x${gv.toString(16)}; want 0x${wk.toString(16)}, 0x${wv.toString(16)}`,
          );
        any ||= (wk & 0x7c00) === 0x7c00 || (wv & 0x7c00) === 0x7c00;
      }
      expect(special, 'the flag of a ±∞ or NaN half').toBe(any ? 1 : 0);
    }
  }
});
