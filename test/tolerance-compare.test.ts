// The comparison rule's report (src/util/tolerance.ts compareArrays): besides ok, count and the first
// mismatches, the worst element against its allowance, which scripts/gpu/bench-gpu.ts records for
// every gate and check. And test/helpers/readback.ts, the callers' readback, on a real device.

import { describe, expect, test } from 'vitest';
import { compareArrays } from '../src/util/tolerance.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';
import { readBuffer } from './helpers/readback.ts';

describe('compareArrays: the worst element against its allowance', () => {
  const tol = { atol: 0.1, rtol: 0.1 };

  test('inside the tolerance: the largest |error| / allowed, and where', () => {
    const r = compareArrays([1, 2.1, 3], [1, 2, 3], tol); // allowed at 1: 0.1 + 0.1·2 = 0.3
    expect(r.ok).toBe(true);
    expect(r.worstIndex).toBe(1);
    expect(r.worstRatio).toBeCloseTo(0.1 / 0.3, 12);
  });

  test('outside it: above 1, counted, and a NaN is the worst (Infinity)', () => {
    const out = compareArrays([1, 2.6, 3], [1, 2, 3], tol);
    expect(out.ok).toBe(false);
    expect(out.count).toBe(1);
    expect(out.worstRatio).toBeCloseTo(0.6 / 0.3, 12);
    const nan = compareArrays([1, 2.6, Number.NaN], [1, 2, 3], tol);
    expect(nan.count).toBe(2);
    expect(nan.worstIndex).toBe(2);
    expect(nan.worstRatio).toBe(Infinity);
  });

  test('equal arrays: ratio 0, no worst index; zero allowance with zero error is not a failure', () => {
    expect(compareArrays([0, 5], [0, 5], { atol: 0, rtol: 0 })).toMatchObject({ ok: true, worstRatio: 0, worstIndex: -1 });
    expect(compareArrays([1e-9], [0], { atol: 0, rtol: 0 })).toMatchObject({ ok: false, worstRatio: Infinity, worstIndex: 0 });
  });
});

test('readBuffer: the first bytes of a buffer, a length that is not a multiple of 4 included', async () => {
  const engine = await createGpuEngine();
  try {
    const device = engine.device!;
    await withErrorScopes(device, async () => {
      const source = device.createBuffer({ size: 16, usage: 0x4 | 0x8 }); // COPY_SRC | COPY_DST
      device.queue.writeBuffer(
        source,
        0,
        Uint8Array.from({ length: 16 }, (_, i) => i + 1),
      );
      expect([...new Uint8Array(await readBuffer(device, source, 6))]).toEqual([1, 2, 3, 4, 5, 6]);
      expect([...new Uint8Array(await readBuffer(device, source, 16))]).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
      source.destroy();
    });
  } finally {
    engine.dispose();
  }
});
