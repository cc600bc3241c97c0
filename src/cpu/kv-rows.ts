// How the float64 reference's attention reads keys and values: one row (Dh values) at a time, through
// KvRows. Head-split arrays [batches, G, rows, Dh] are read where they lie (denseRows); a CPU KV cache
// hands its own reader (cpu/backend.ts): float64 rows read in place, and f16 / q8_0 / q4_0 rows decoded
// one at a time into a Dh scratch (the cache is never copied whole).

/** Keys or values [batches, G, rows, Dh], one row at a time. */
export interface KvRows {
  /** Where row r of head block bg (= batch·G + kvHead) starts in `data`: its Dh values, valid until the next row() call. */
  row(bg: number, r: number): number;
  /** The array row() points into (for a decoding reader, its scratch). */
  readonly data: Float64Array;
}

/** A head-split array [batches, G, rows, Dh] read in place. */
export function denseRows(data: Float64Array, rows: number, Dh: number): KvRows {
  const stride = rows * Dh;
  return { data, row: (bg, r) => bg * stride + r * Dh };
}

/** `source` as KvRows: an array is read in place as [batches, G, rows, Dh]. */
export function asKvRows(source: Float64Array | KvRows, rows: number, Dh: number): KvRows {
  return source instanceof Float64Array ? denseRows(source, rows, Dh) : source;
}
