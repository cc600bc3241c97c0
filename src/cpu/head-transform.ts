// QK-norm and rotary embeddings in float64: what shaders/head_transform.wgsl does to every query and
// key head after the projection, pass 1½ of the reference. An RMS norm with the head's weights
// (config.qkNorm; over 'all': one norm over all heads of a token), then the rotation of the first `dim`
// features by position·θ_i (config.rotary). And the weightless RMS norm of the value heads (config.vNorm).

import { type ForwardPlan, type LayerSpec, rotaryAngle } from '../plan/index.ts';

/**
 * Transforms `heads` [batches, count, stride, Dh] in place: the query heads (kind 'query') or the key
 * heads ('key') of rows row0 … row0 + rows − 1 of each block, token m = b·rows + s at plan.positions[m].
 * Float32 heads (the 'wasm' backend's) are transformed in float64 and stored rounded.
 */
export function transformHeads(plan: ForwardPlan, heads: Float64Array | Float32Array, kind: 'query' | 'key', count: number, rows: number, stride = rows, row0 = 0): void {
  const { rotary, qkNorm, headDim: Dh } = plan.layer;
  if (!rotary && !qkNorm) return;
  const batches = heads.length / (count * stride * Dh);
  const bases: number[] = new Array(count);
  for (let b = 0; b < batches; b++) {
    for (let s = 0; s < rows; s++) {
      for (let h = 0; h < count; h++) bases[h] = ((b * count + h) * stride + row0 + s) * Dh;
      transformToken(plan.layer, heads, bases, kind, rotary ? plan.positions![b * rows + s] : 0);
    }
  }
}

/**
 * One token's heads (head h's Dh features at heads[bases[h] …]) in place: QK-norm (over 'all': one RMS
 * norm over all its heads' features with weights [count·Dh]), then each head's own transform.
 */
export function transformToken(layer: LayerSpec, heads: Float64Array | Float32Array, bases: readonly number[], kind: 'query' | 'key', position: number): void {
  const { qkNorm, headDim: Dh } = layer;
  if (qkNorm?.over === 'all') {
    const weight = kind === 'query' ? qkNorm.query : qkNorm.key;
    let squares = 0;
    for (const base of bases) for (let d = 0; d < Dh; d++) squares += heads[base + d] ** 2;
    const r = 1 / Math.sqrt(squares / (bases.length * Dh) + qkNorm.eps);
    bases.forEach((base, h) => {
      for (let d = 0; d < Dh; d++) heads[base + d] *= r * weight[h * Dh + d];
    });
  }
  for (const base of bases) transformHead(layer, heads, base, kind, position);
}

/** One head's Dh features at heads[base …] in place: QK-norm with the head's weights (over 'head'), then rotary at `position`. */
export function transformHead(layer: LayerSpec, heads: Float64Array | Float32Array, base: number, kind: 'query' | 'key', position: number): void {
  const { rotary, qkNorm, headDim: Dh } = layer;
  if (qkNorm && qkNorm.over === 'head') {
    const weight = kind === 'query' ? qkNorm.query : qkNorm.key;
    let squares = 0;
    for (let d = 0; d < Dh; d++) squares += heads[base + d] ** 2;
    const r = 1 / Math.sqrt(squares / Dh + qkNorm.eps);
    for (let d = 0; d < Dh; d++) heads[base + d] *= r * weight[d];
  }
  if (rotary) {
    const half = rotary.dim / 2;
    for (let i = 0; i < half; i++) {
      const [c, sn] = rotaryAngle(rotary, position, i);
      const [a, z] = rotary.interleaved ? [base + 2 * i, base + 2 * i + 1] : [base + i, base + i + half];
      const x = heads[a];
      const y = heads[z];
      heads[a] = x * c - y * sn;
      heads[z] = y * c + x * sn;
    }
  }
}

/** The weightless RMS norm of every value head (config.vNorm), in place: `values` holds heads of Dh features back to back. */
export function normValues(layer: LayerSpec, values: Float64Array | Float32Array, offset = 0, length = values.length - offset): void {
  const { vNorm, headDim: Dh } = layer;
  if (!vNorm) return;
  for (let base = offset; base < offset + length; base += Dh) {
    let squares = 0;
    for (let d = 0; d < Dh; d++) squares += values[base + d] ** 2;
    const r = 1 / Math.sqrt(squares / Dh + vNorm.eps);
    for (let d = 0; d < Dh; d++) values[base + d] *= r;
  }
}
