// Which build of the 'wasm' kernels a platform runs: 'relaxed' (relaxed SIMD too) where a probe module
// validates and computes as the specification says, else 'simd128'. src/wasm/kernels.ts compiles the one
// chosen (and re-exports these names).

/**
 * The builds of the kernels: 'simd128' with WebAssembly's 128-bit SIMD, 'relaxed' with relaxed SIMD too.
 * Where they differ: the 4-bit weights' 'q8' products take relaxed SIMD's i8 dot product (wasm/q8.ts
 * Q8.rdot), exact, so the projections give the 'simd128' bits; and the float kernels' multiply-adds (the
 * attention, the float GEMM: wasm/gemm.ts F.madd) are f32x4.relaxed_madd, one fused multiply-add where the
 * CPU has one (x86 FMA3, Arm), so their results may differ from 'simd128's in the last bits (one rounding
 * fewer), never by more than float32's error.
 */
export type WasmSimd = 'relaxed' | 'simd128';

// The probe of relaxed SIMD: a module whose f() stores i16x8.relaxed_dot_i8x16_i7x16_s(a, b) (what
// wasm/q8.ts Q8.rdot uses) at address 0 of its memory, for a = −128 … 127 in steps of 17 (i8) and
// b = 15 … 0 (the 7-bit operand: nibbles, as the kernels give it), and f32x4.relaxed_madd(x, y, z) (the
// float kernels' F.madd) at address 16. Where relaxed SIMD is missing (Node 20 without
// --experimental-wasm-relaxed-simd, Firefox, Safari) it does not validate; a platform that validates it
// must also compute both as the specification says: the dot product exactly, x·y + z fused or not.
// (Node 20's flag gets the dot product's sibling i32x4.relaxed_dot_i8x16_i7x16_add_s wrong in its
// baseline compiler: 2·Σ a·b, the addend dropped.)
const PROBE_A = Array.from({ length: 16 }, (_, i) => 17 * i - 128);
const PROBE_B = Array.from({ length: 16 }, (_, i) => 15 - i);
/** relaxed_madd's operands, a lane each: lane 0's fused and unfused results differ (2⁻¹¹ + 2⁻²⁴ against 2⁻¹¹). */
const MADD_X = [1 + 2 ** -12, 2, -0.75, 3];
const MADD_Y = [1 + 2 ** -12, 3, 4, -5];
const MADD_Z = [-1, 4, 0.5, 7];
/** What each lane of relaxed_madd may give: x·y + z rounded once, or x·y rounded and then the sum (float32 operands: the products are exact in float64). */
const MADD_ALLOWED = MADD_X.map((x, i) => [Math.fround(x * MADD_Y[i] + MADD_Z[i]), Math.fround(Math.fround(x * MADD_Y[i]) + MADD_Z[i])]);
/** `v128.const` of 16 bytes. */
const v128Const = (bytes: number[]) => [0xfd, 0x0c, ...bytes.map((v) => v & 0xff)];
/** `i32.const at` (at < 64: one LEB128 byte). */
const address = (at: number) => [0x41, at];
const STORE = [0xfd, 0x0b, 0x04, 0x00]; // v128.store align=16 offset=0

/** A module of one memory page and a function f() of `body` (no locals, under 128 bytes), exported as "m" and "f". */
function probeModule(code: number[]): Uint8Array<ArrayBuffer> {
  const body = [0x00, ...code, 0x0b]; // no locals … end
  const section = (id: number, content: number[]) => [id, content.length, ...content];
  return new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, [0x01, 0x60, 0x00, 0x00]), // one type: () → ()
    ...section(3, [0x01, 0x00]), // one function of it
    ...section(5, [0x01, 0x00, 0x01]), // a memory of one page
    ...section(7, [0x02, 0x01, 0x6d, 0x02, 0x00, 0x01, 0x66, 0x00, 0x00]), // exports "m" (the memory) and "f"
    ...section(10, [0x01, body.length, ...body]), // lengths below 128: one LEB128 byte each
  ]);
}

const RELAXED_PROBE = (() => {
  const f32Const = (values: number[]) => v128Const(Array.from(new Uint8Array(Float32Array.from(values).buffer)));
  const relaxedDot = [0xfd, 0x92, 0x02]; // i16x8.relaxed_dot_i8x16_i7x16_s
  const relaxedMadd = [0xfd, 0x85, 0x02]; // f32x4.relaxed_madd
  return probeModule([
    ...address(0),
    ...v128Const(PROBE_A),
    ...v128Const(PROBE_B),
    ...relaxedDot,
    ...STORE,
    ...address(16),
    ...f32Const(MADD_X),
    ...f32Const(MADD_Y),
    ...f32Const(MADD_Z),
    ...relaxedMadd,
    ...STORE,
  ]);
})();

/**
 * Whether this platform runs the 'relaxed' build right: it validates a relaxed instruction and computes
 * it as the specification says for the operands the kernels give it (not cached: a flag may change it).
 */
export function relaxedSimdSupported(): boolean {
  const m = runProbe(RELAXED_PROBE);
  if (!m) return false;
  const dot = new Int16Array(m.buffer, 0, 8);
  const madd = new Float32Array(m.buffer, 16, 4);
  return dot.every((v, j) => v === PROBE_A[2 * j] * PROBE_B[2 * j] + PROBE_A[2 * j + 1] * PROBE_B[2 * j + 1]) && madd.every((v, j) => MADD_ALLOWED[j].includes(v));
}

/** A probe module validated, instantiated and its f() run once (its first call): its memory, or null where it does not validate or throws. */
function runProbe(bytes: Uint8Array<ArrayBuffer>): WebAssembly.Memory | null {
  try {
    if (!WebAssembly.validate(bytes)) return null;
    const { m, f } = new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports as { m: WebAssembly.Memory; f: () => void };
    f();
    return m;
  } catch {
    return null;
  }
}

/** The build `wanted` asks for ('auto': 'relaxed' where supported) on this platform; null: 'relaxed' asked for and missing. */
export function resolveWasmSimd(wanted: WasmSimd | 'auto' = 'auto'): WasmSimd | null {
  if (wanted === 'simd128') return 'simd128';
  if (relaxedSimdSupported()) return 'relaxed';
  return wanted === 'relaxed' ? null : 'simd128';
}

// The probe of relaxed SIMD's i8 dot product with its sum, i32x4.relaxed_dot_i8x16_i7x16_add_s (what
// wasm/q8.ts's DOT_ADD form takes: src/wasm/dot-add.ts): a fresh module's f() stores it at address 0 for
// PROBE_A (i8) and PROBE_B (the 7-bit operand) and an addend; its first call runs the baseline compiler's
// code, which Node 20 gets wrong (2·Σ a·b, the addend dropped).
const ADDEND = [1 << 20, -12345, 7, -(1 << 24)];
const DOT_ADD_PROBE = probeModule([
  ...address(0),
  ...v128Const(PROBE_A),
  ...v128Const(PROBE_B),
  ...v128Const(Array.from(new Uint8Array(Int32Array.from(ADDEND).buffer))),
  0xfd,
  0x93,
  0x02, // i32x4.relaxed_dot_i8x16_i7x16_add_s
  ...STORE,
]);

/**
 * Whether this platform computes i32x4.relaxed_dot_i8x16_i7x16_add_s as the specification says for the
 * operands the kernels give it, in a fresh module's first call (V8's baseline compiler): lane i =
 * addend[i] + Σ of its 4 products. False where relaxed SIMD is missing. Not cached (a flag may change it).
 */
export function relaxedDotAddRight(): boolean {
  const m = runProbe(DOT_ADD_PROBE);
  if (!m) return false;
  const lanes = new Int32Array(m.buffer, 0, 4);
  return lanes.every((v, i) => v === ADDEND[i] + [0, 1, 2, 3].reduce((sum, k) => sum + PROBE_A[4 * i + k] * PROBE_B[4 * i + k], 0));
}
