// Helpers the GEMM cores share, appended with a core to a projection's problem file (the host joins
// them: src/webgpu/variants/gemm.ts, software/gemm.ts), which supplies aRow, bRow and params.M, params.N
// (gemm_register_4x4.wgsl describes them). Small and called with the core's own values, so every
// compiler inlines them: the generated code is the core's as if written out.

// vec4 indices of rows row0 … row0 + 3 of A; rows past M re-read the last one (their results are never stored).
fn aRows4(row0: u32) -> vec4<u32> {
  let last = params.M - 1u;
  return vec4<u32>(aRow(min(row0, last)), aRow(min(row0 + 1u, last)), aRow(min(row0 + 2u, last)), aRow(min(row0 + 3u, last)));
}

// vec4 indices of rows col0 … col0 + 3 of B (output columns); columns past N re-read the last one.
fn bRows4(col0: u32) -> vec4<u32> {
  let last = params.N - 1u;
  return vec4<u32>(bRow(min(col0, last)), bRow(min(col0 + 1u, last)), bRow(min(col0 + 2u, last)), bRow(min(col0 + 3u, last)));
}
