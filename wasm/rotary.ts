// AssemblyScript, compiled with the other kernels by scripts/build-wasm.mjs. Rotary position embeddings
// of the 'wasm' backend (src/wasm/rotary.ts calls it): cpu/head-transform.ts's transformHead for a layer
// with rotary and no QK-norm, on every head of token-major rows, in float64 as that JavaScript computes it
// (x·c − y·s and y·c + x·s of the float32 values widened, each product rounded to float64, the result
// to float32), so the same bits.
//
//   rotary  x [rows, heads·Dh] f32 (row stride ldx floats), each row's (cos, sin) pairs at
//           angles + row·dim·8 (f64 [rows, dim]: plan/head-transform.ts's rotaryAngles), features
//           (i, i + dim/2) of each head turned (interleaved: (2i, 2i + 1)), i < dim/2

export function rotary(x: usize, ldx: i32, rows: i32, heads: i32, Dh: i32, angles: usize, dim: i32, interleaved: i32): void {
  const half = dim >> 1;
  const headBytes = (<usize>Dh) << 2;
  for (let m = 0; m < rows; m++) {
    const row = x + ((<usize>m * <usize>ldx) << 2);
    const am = angles + ((<usize>m * <usize>dim) << 3);
    for (let h = 0; h < heads; h++) {
      const base = row + <usize>h * headBytes;
      if (interleaved !== 0) {
        for (let i = 0; i < half; i++) {
          const cs = v128.load(am + ((<usize>i) << 4)); // (cos, sin)
          const a = base + ((<usize>i) << 3);
          const x0 = <f64>load<f32>(a);
          const y0 = <f64>load<f32>(a, 4);
          const c = f64x2.extract_lane(cs, 0);
          const s = f64x2.extract_lane(cs, 1);
          store<f32>(a, <f32>(x0 * c - y0 * s));
          store<f32>(a, <f32>(y0 * c + x0 * s), 4);
        }
      } else {
        const zOff = (<usize>half) << 2;
        let i = 0;
        // Two pairs a step: (x_i, x_i+1) against (y_i, y_i+1), f64x2 each (the same float64 products and sums).
        for (; i + 2 <= half; i += 2) {
          const a = base + ((<usize>i) << 2);
          const c = v128.load(am + ((<usize>i) << 4)); // (cos_i, sin_i, …) → lanes below
          const d = v128.load(am + ((<usize>i) << 4), 16);
          const cos = v128.shuffle<f64>(c, d, 0, 2);
          const sin = v128.shuffle<f64>(c, d, 1, 3);
          const xs = f64x2.promote_low_f32x4(v128.load64_zero(a));
          const ys = f64x2.promote_low_f32x4(v128.load64_zero(a + zOff));
          const nx = f32x4.demote_f64x2_zero(f64x2.sub(f64x2.mul(xs, cos), f64x2.mul(ys, sin)));
          const ny = f32x4.demote_f64x2_zero(f64x2.add(f64x2.mul(ys, cos), f64x2.mul(xs, sin)));
          v128.store64_lane(a, nx, 0);
          v128.store64_lane(a + zOff, ny, 0);
        }
        for (; i < half; i++) {
          const a = base + ((<usize>i) << 2);
          const x0 = <f64>load<f32>(a);
          const y0 = <f64>load<f32>(a + zOff);
          const c = load<f64>(am + ((<usize>i) << 4));
          const s = load<f64>(am + ((<usize>i) << 4), 8);
          store<f32>(a, <f32>(x0 * c - y0 * s));
          store<f32>(a + zOff, <f32>(y0 * c + x0 * s));
        }
      }
    }
  }
}
