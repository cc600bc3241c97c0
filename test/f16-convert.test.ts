// util/f16.ts, the package's one float32 ⇄ float16 conversion: its array forms agree with its scalar
// forms on every half bit pattern, whichever path (direct, or the table of all 65536) a length takes.
// The rounding itself is pinned in quant-formats.test.ts ('floatToHalfBits rounds to nearest even').

import { expect, test } from 'vitest';
import { floatToHalfBits, fromF16, halfToFloat, toF16 } from '../src/util/f16.ts';

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
