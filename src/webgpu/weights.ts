// A layer's weights: the host copy a WebGPU layer keeps (float32, or packed: src/quant/types.ts
// PackedWeight, never expanded), and their GPU copy, uploaded once per device, destroyed with the layer
// (or its device). The upload runs in error scopes (scopes.ts); making a layer is synchronous, so their
// verdict is kept, and every call with these weights awaits it beside its own (submit.ts): a refused
// upload (out of memory, most likely) rejects each of them with WebGPUCallError('MultiHeadAttention
// weight upload', …), never a forward on weights that are not there.
//
// Quantized weights are repacked once, here, from their file's blocks (GGUF's 18- and 34-byte blocks
// are not 4-byte aligned; K-quants interleave scales with quants) into the aligned layout the kernels
// read: u32 words of quants and an f32 (scale, offset) pair per group (src/quant/pack.ts packWeight).
// On the GPU each packed weight is two storage buffers, so engine.stats().bytes counts their size.

import { UnsupportedError } from '../errors.ts';
import type { GateWeights } from './kernels/output-gate.ts';
import { type LayerSpec, type LayerWeights, floatLayerWeights, isFloat } from '../plan/index.ts';
import { packedGeometry, packWeight } from '../quant/pack.ts';
import type { PackedWeight, WeightTensor } from '../quant/types.ts';
import { type BufferPool, Usage } from './buffers.ts';
import type { GpuWeight, ProjectionFormats, WeightFormat } from './kernels/packed-weight.ts';
import type { ProjectionWeights } from './kernels/qkv-projection.ts';
import { padWeights, unpaddedOf } from './padding.ts';
import { ErrorScopes, type Verdict } from './scopes.ts';

/** A weight as the host keeps it: float32 (the layer's own copy) or packed. */
export type HostWeight = Float32Array | PackedWeight;

/** A layer's weights as a WebGPU layer keeps them, for its padded spec. */
export interface HostLayerWeights {
  /** [(H+2G)·Dh, E], or null when q, k and v are apart (kdim/vdim ≠ E, or quantized each of its own type). */
  inProj: HostWeight | null;
  q: HostWeight | null;
  k: HostWeight | null;
  v: HostWeight | null;
  inProjBias: Float32Array | null;
  out: HostWeight; // [E, H·Dh]
  outProjBias: Float32Array | null;
  /** config.outputGate's W_g [H·Dh, E] and b_g [H·Dh] (float32, padded), or absent. */
  gate?: { weight: Float32Array; bias: Float32Array | null } | null;
  /** config.activations 'q8': whether the QKV projection's inputs and the output projection's are rounded (their weights were quantized), else absent. */
  q8?: Q8Inputs | null;
}

/** Which projections' inputs config.activations 'q8' rounds (kernels/activations-q8.ts). */
export interface Q8Inputs {
  qkv: boolean;
  out: boolean;
}

/**
 * config.activations 'q8' on WebGPU: the inputs of projections with quantized weights rounded as
 * ggml's Q8_0 by a pass before them. The QKV projection reads one input for q, k and v in a
 * self-attention layer, so q, k and v must be all quantized or all float32 here.
 */
function q8Inputs(spec: LayerSpec, weights: LayerWeights): Q8Inputs | null {
  if (spec.activations !== 'q8') return null;
  const packed = [weights.qProjWeight, weights.kProjWeight, weights.vProjWeight].map((t) => !(t instanceof Float32Array));
  if (packed.some((p) => p !== packed[0])) {
    throw new UnsupportedError({
      where: 'createMultiHeadAttention',
      argument: 'config.activations',
      expected: "'q8' on WebGPU with q, k and v weights all quantized or all float32",
      given: `q ${packed[0] ? 'quantized' : 'float32'}, k ${packed[1] ? 'quantized' : 'float32'}, v ${packed[2] ? 'quantized' : 'float32'}`,
      fix: "Quantize q, k and v alike, run on backend 'wasm' or 'cpu' (either takes the mix), or leave config.activations out.",
    });
  }
  return { qkv: packed[0], out: !(weights.outProjWeight instanceof Float32Array) };
}

function formatOfHost(w: HostWeight): WeightFormat | null {
  return w instanceof Float32Array ? null : { bits: w.bits, group: w.group };
}

/** The formats of a layer's weights (what its plans carry: packed-weight.ts). */
export function hostFormats(w: HostLayerWeights): ProjectionFormats {
  const qkv = w.inProj ? [w.inProj] : [w.q!, w.k!, w.v!];
  return { qkv: qkv.map(formatOfHost), out: formatOfHost(w.out) };
}

/** Rows and K/4 the packed kernels can index (weights_packed.wgsl: row·2¹⁶ + k4), and a group size that is a power of two. */
function packable(t: WeightTensor): boolean {
  if (t instanceof Float32Array) return true;
  const { group } = packedGeometry(t);
  return t.shape[0] < 65536 && t.shape[1] % 4 === 0 && t.shape[1] / 4 < 65536 && group >= 16 && (group & (group - 1)) === 0;
}

function pack(t: WeightTensor): HostWeight {
  return t instanceof Float32Array ? t.slice() : packWeight(t);
}

/** Packed weights of one format, rows one after the other (same K): one weight. */
function concatRows(parts: PackedWeight[]): PackedWeight {
  const [first] = parts;
  const rows = parts.reduce((n, p) => n + p.rows, 0);
  const quants = new Uint32Array(rows * first.wordsPerRow);
  const scaleOffset = new Float32Array(rows * first.groups * 2);
  let [qAt, sAt] = [0, 0];
  for (const p of parts) {
    quants.set(p.quants, qAt);
    scaleOffset.set(p.scaleOffset, sAt);
    qAt += p.quants.length;
    sAt += p.scaleOffset.length;
  }
  return { ...first, rows, quants, scaleOffset };
}

/**
 * The host copy of a layer's weights for its padded spec (webgpu/padding.ts): quantized weights packed,
 * float ones copied. A layer that needs padding (E or Dh not a multiple of 4) with quantized weights is
 * dequantized to float32 and padded as a float layer: padding in the packed domain would re-block
 * every row, and GGUF types have K a multiple of 32 (so only heads of odd sizes come here). So are
 * weights whose sizes the packed kernels cannot index (2¹⁶ rows or more, K/4 ≥ 2¹⁶).
 */
export function hostWeights(spec: LayerSpec, weights: LayerWeights): HostLayerWeights {
  const q8 = q8Inputs(spec, weights);
  const all = [weights.inProjWeight, weights.qProjWeight, weights.kProjWeight, weights.vProjWeight, weights.outProjWeight];
  if (unpaddedOf(spec) || isFloat(weights) || all.some((t) => t && !packable(t))) {
    const float = floatLayerWeights(weights);
    const padded = padWeights(spec, float);
    const own = padded === float ? null : padded; // padWeights made new arrays
    const copy = (a: Float32Array) => (own ? a : a.slice());
    return {
      inProj: float.inProjWeight ? copy(padded.inProjWeight!) : null,
      q: float.inProjWeight ? null : copy(padded.qProjWeight),
      k: float.inProjWeight ? null : copy(padded.kProjWeight),
      v: float.inProjWeight ? null : copy(padded.vProjWeight),
      inProjBias: padded.inProjBias ? copy(padded.inProjBias) : null,
      out: copy(padded.outProjWeight),
      outProjBias: padded.outProjBias ? copy(padded.outProjBias) : null,
      gate: padded.gateProjWeight ? { weight: copy(padded.gateProjWeight), bias: padded.gateProjBias ? copy(padded.gateProjBias) : null } : null,
      q8,
    };
  }
  let inProj: HostWeight | null = weights.inProjWeight ? pack(weights.inProjWeight) : null;
  let [q, k, v]: (HostWeight | null)[] = inProj ? [null, null, null] : [pack(weights.qProjWeight), pack(weights.kProjWeight), pack(weights.vProjWeight)];
  // q, k and v quantized apart in one format (bits, group) and all of K = E: one weight, one dispatch.
  const sameK = spec.kdim === spec.embedDim && spec.vdim === spec.embedDim;
  if (!inProj && sameK && [q, k, v].every((w) => w && !(w instanceof Float32Array))) {
    const [pq, pk, pv] = [q, k, v] as PackedWeight[];
    if (pk.bits === pq.bits && pv.bits === pq.bits && pk.group === pq.group && pv.group === pq.group) {
      inProj = concatRows([pq, pk, pv]);
      [q, k, v] = [null, null, null];
    }
  }
  return {
    inProj,
    q,
    k,
    v,
    inProjBias: weights.inProjBias?.slice() ?? null,
    out: pack(weights.outProjWeight),
    outProjBias: weights.outProjBias?.slice() ?? null,
    gate: weights.gateProjWeight ? { weight: weights.gateProjWeight.slice(), bias: weights.gateProjBias?.slice() ?? null } : null,
    q8,
  };
}

/** What a refused weight upload's rejection names (WebGPUCallError.where). */
export const WEIGHT_UPLOAD = 'MultiHeadAttention weight upload';

/** A layer's weights on the GPU, uploaded once. Missing biases are uploaded as zeros. */
export class GpuLayerWeights {
  readonly projection: ProjectionWeights;
  readonly outProjWeight: GpuWeight; // [E, H·Dh]
  readonly outProjBias: GPUBuffer; // [E]
  /** config.outputGate's W_g [H·Dh, E] and b_g [H·Dh] (zeros without bias), or null. */
  readonly gate: GateWeights | null;
  /** config.activations 'q8': which projections' inputs are rounded first (forward.ts), or null. */
  readonly q8: Q8Inputs | null;
  /** Whether WebGPU accepted the upload: every call with these weights awaits it (forward.ts). */
  readonly verdict: Verdict;
  private readonly buffers: GPUBuffer[] = [];

  constructor(
    private readonly pool: BufferPool,
    spec: LayerSpec,
    weights: HostLayerWeights,
  ) {
    const N = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
    this.q8 = weights.q8 ?? null;
    const scopes = new ErrorScopes(pool.device);
    try {
      const bias = this.float(weights.inProjBias ?? new Float32Array(N), 'MultiHeadAttention.in_proj_bias');
      this.projection = weights.inProj
        ? { inProj: this.weight(weights.inProj, 'MultiHeadAttention.in_proj_weight'), bias }
        : {
            q: this.weight(weights.q!, 'MultiHeadAttention.q_proj_weight'),
            k: this.weight(weights.k!, 'MultiHeadAttention.k_proj_weight'),
            v: this.weight(weights.v!, 'MultiHeadAttention.v_proj_weight'),
            bias,
          };
      this.outProjWeight = this.weight(weights.out, 'MultiHeadAttention.out_proj.weight');
      this.outProjBias = this.float(weights.outProjBias ?? new Float32Array(spec.embedDim), 'MultiHeadAttention.out_proj.bias');
      const gate = weights.gate;
      this.gate = gate
        ? {
            weight: this.float(gate.weight, 'MultiHeadAttention.gate_proj_weight'),
            bias: this.float(gate.bias ?? new Float32Array(spec.numHeads * spec.headDim), 'MultiHeadAttention.gate_proj_bias'),
          }
        : null;
    } finally {
      this.verdict = scopes.verdict(WEIGHT_UPLOAD);
    }
  }

  destroy(): void {
    for (const b of this.buffers) this.pool.destroy(b);
  }

  private float(data: Float32Array, label: string): GPUBuffer {
    const buffer = this.pool.upload(data, Usage.STORAGE, label);
    this.buffers.push(buffer);
    return buffer;
  }

  /** A float weight at the engine's precision, or a packed one as its two buffers: quants [N, wordsPerRow] u32, scaleOffset [N, groups, 2] f32. */
  private weight(w: HostWeight, label: string): GpuWeight {
    if (w instanceof Float32Array) return this.float(w, label);
    const raw = (data: Uint32Array | Float32Array, role: string) => {
      const buffer = this.pool.allocate(data.byteLength, Usage.STORAGE | Usage.COPY_DST, `${label}.${role}`);
      this.pool.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
      this.buffers.push(buffer);
      return buffer;
    };
    return { format: { bits: w.bits, group: w.group }, quants: raw(w.quants, 'quants'), scaleOffset: raw(w.scaleOffset, 'scaleOffset') };
  }
}
