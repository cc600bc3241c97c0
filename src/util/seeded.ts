// The seeded generator every test, demo run, benchmark and the tuner's correctness gate draws from
// (test/helpers/random.ts builds weights and inputs on it), so that each can be replayed from its seed.

/** mulberry32: a small, fast 32-bit generator; returns floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `length` values uniform in [−bound, bound). */
export function uniform(length: number, bound: number, rng: () => number): Float32Array {
  const out = new Float32Array(length);
  for (let i = 0; i < length; i++) out[i] = (2 * rng() - 1) * bound;
  return out;
}
