// Splitting a call that exceeds the device's limits into calls that fit: over the batch (or, for
// varlen batches, over groups of whole sequences). Results are concatenated back, so a chunked call
// equals the unchunked one. Where one batch element (one sequence) alone does not fit, splitting cannot
// help, and the error names the limit and the size asked for.

import { DeviceLimitError } from '../errors.ts';
import { type ForwardPlan, geometryOf, type MaskPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';

/** The limits this engine obeys: the device's, or smaller ones from createAttentionEngine({ limits }). */
export interface EngineLimits {
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  maxComputeWorkgroupsPerDimension: number;
}

// Rows per workgroup of register-4x4 (tier 0) and the rows32-* attention variants. The subgroup GEMM
// cores cover fewer (4 to 16): where a call would need more workgroups than allowed with them, they
// give way to register-4x4 (backend.ts, withinDispatchLimit).
const ROWS_PER_WORKGROUP = 32;

interface Cost {
  what: string;
  /** Bytes (or workgroups) per unit (batch element, or token for varlen) and fixed part. */
  perUnit: number;
  fixed: number;
  limit: number;
  limitName: string;
  /** Rounds units up to workgroups (dispatch limits). */
  perWorkgroup?: number;
}

/** What one call needs, as linear functions of the batch size (or of the tokens, varlen). */
function costs(plan: ForwardPlan, limits: EngineLimits): Cost[] {
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = plan.layer;
  const varlen = plan.mode === 'varlen';
  const Sq = varlen ? 1 : plan.seqLen; // varlen: per token
  const Skv = varlen ? 1 : plan.kvSeqLen;
  const bind = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  const wg = limits.maxComputeWorkgroupsPerDimension;
  const binding = (what: string, perUnit: number, fixed = 0): Cost => ({
    what,
    perUnit: perUnit * 4,
    fixed: fixed * 4,
    limit: bind,
    limitName: 'maxStorageBufferBindingSize',
  });
  const list: Cost[] = [
    binding('the query [B, Sq, E]', Sq * E),
    binding('the Q/K/V buffer', (H * Sq + 2 * G * Skv) * Dh),
    binding('the attention output [B, H, Sq, Dh]', H * Sq * Dh),
    {
      what: 'the staging buffer for the read-back',
      perUnit: 4 * (Sq * E + (plan.needWeights ? H * Sq * Skv : 0)),
      fixed: 0,
      limit: limits.maxBufferSize,
      limitName: 'maxBufferSize',
    },
    {
      what: 'workgroups along the token rows (B·Sq / 32)',
      perUnit: Sq,
      fixed: 0,
      limit: wg,
      limitName: 'maxComputeWorkgroupsPerDimension',
      perWorkgroup: ROWS_PER_WORKGROUP,
    },
  ];
  if (plan.mode === 'cross') list.push(binding('the key [B, Skv, kdim]', Skv * kdim), binding('the value [B, Skv, vdim]', Skv * vdim));
  if (plan.needWeights) {
    list.push(binding('the attention weights [B, H, Sq, Skv] (needWeights)', H * Sq * Skv));
    list.push({ what: 'workgroups over B·H for the attention weights', perUnit: H, fixed: 0, limit: wg, limitName: 'maxComputeWorkgroupsPerDimension' });
  }
  const m = plan.masks;
  if (m.attnMask) list.push(m.attnMaskPerHead ? binding('attnMask [B·H, Sq, Skv]', H * Sq * Skv) : binding('attnMask [Sq, Skv]', 0, Sq * Skv));
  if (!varlen) list.push({ what: 'workgroups over the batch (flash attention)', perUnit: 1, fixed: 0, limit: wg, limitName: 'maxComputeWorkgroupsPerDimension' });
  return list;
}

function fits(c: Cost, units: number): boolean {
  const used = c.perWorkgroup ? Math.ceil((c.perUnit * units) / c.perWorkgroup) : c.fixed + c.perUnit * units;
  return used <= c.limit;
}

function refuse(plan: ForwardPlan, c: Cost, units: number, unitName: string): never {
  const used = c.perWorkgroup ? Math.ceil((c.perUnit * units) / c.perWorkgroup) : c.fixed + c.perUnit * units;
  throw new DeviceLimitError({
    where: 'MultiHeadAttention.forward',
    argument: c.what,
    expected: `at most ${c.limitName} = ${c.limit}${c.perWorkgroup ? ' workgroups' : ' bytes'}`,
    given:
      plan.mode === 'varlen'
        ? `${used} for a single sequence of ${units} tokens`
        : `${used} for a single ${unitName} (seqLen ${plan.seqLen}${plan.mode === 'cross' ? `, kvSeqLen ${plan.kvSeqLen}` : ''})`,
    fix: `Splitting the batch cannot help here: use shorter sequences${plan.needWeights ? ', or leave out needWeights' : ''}.`,
  });
}

function sliceMasks(m: MaskPlan, b0: number, b1: number, H: number, Sq: number, Skv: number): MaskPlan {
  return {
    attnMask: m.attnMask && m.attnMaskPerHead ? m.attnMask.subarray(b0 * H * Sq * Skv, b1 * H * Sq * Skv) : m.attnMask,
    attnMaskPerHead: m.attnMaskPerHead,
    keyPaddingMask: m.keyPaddingMask ? m.keyPaddingMask.subarray(b0 * Skv, b1 * Skv) : null,
    window: m.window,
    headMask: m.headMask ? m.headMask.subarray(b0 * H, b1 * H) : null,
  };
}

/**
 * The plan as calls that each fit `limits`: itself when it fits. Works for a layer's query [B, Sq, E]
 * and for scaledDotProductAttention's [B, H, Sq, Dh] alike: both are contiguous per batch element.
 */
export function splitPlan(plan: ForwardPlan, limits: EngineLimits): ForwardPlan[] {
  const all = costs(plan, limits);
  const { numHeads: H, embedDim: E } = plan.layer;
  if (plan.mode === 'varlen') {
    // Greedy groups of whole sequences, each within every limit; varlen batches never need the
    // batch dispatch limit except through the number of sequences per call.
    const cu = plan.cuSeqlens!;
    const n = cu.length - 1;
    const groups: [number, number][] = [];
    let first = 0;
    for (let s = 0; s < n; s++) {
      const tokens = cu[s + 1] - cu[first];
      const ok = all.every((c) => fits(c, tokens)) && s + 1 - first <= limits.maxComputeWorkgroupsPerDimension;
      if (ok) continue;
      if (s === first) refuse(plan, all.find((c) => !fits(c, cu[s + 1] - cu[s]))!, cu[s + 1] - cu[s], 'sequence');
      groups.push([first, s]);
      first = s;
    }
    groups.push([first, n]);
    if (groups.length === 1) return [plan];
    return groups.map(([s0, s1]) => {
      const t0 = cu[s0];
      const t1 = cu[s1];
      const sub = cu.slice(s0, s1 + 1).map((v) => v - t0);
      const query = plan.query.subarray(t0 * E, t1 * E);
      return {
        ...plan,
        batchSize: s1 - s0,
        seqLen: t1 - t0,
        kvSeqLen: t1 - t0,
        cuSeqlens: sub,
        positions: plan.positions ? plan.positions.subarray(t0, t1) : null,
        geometry: geometryOf('varlen', s1 - s0, t1 - t0, t1 - t0, Math.max(...sub.subarray(1).map((v, i) => v - sub[i]))),
        masks: { ...plan.masks, headMask: plan.masks.headMask ? plan.masks.headMask.subarray(s0 * H, s1 * H) : null },
        query,
        key: query,
        value: query,
      };
    });
  }
  let per = plan.batchSize; // batch elements per call: the most every limit allows
  for (const c of all) {
    if (!fits(c, 1)) refuse(plan, c, 1, 'batch element');
    if (c.perUnit > 0) per = Math.min(per, Math.floor(c.perWorkgroup ? (c.limit * c.perWorkgroup) / c.perUnit : (c.limit - c.fixed) / c.perUnit));
  }
  if (per >= plan.batchSize) return [plan];
  const { seqLen: Sq, kvSeqLen: Skv } = plan;
  const qWidth = plan.query.length / (plan.batchSize * Sq);
  const plans: ForwardPlan[] = [];
  for (let b0 = 0; b0 < plan.batchSize; b0 += per) {
    const b1 = Math.min(plan.batchSize, b0 + per);
    const query = plan.query.subarray(b0 * Sq * qWidth, b1 * Sq * qWidth);
    const kvWidth = (a: Float32Array) => a.length / (plan.batchSize * Skv);
    plans.push({
      ...plan,
      batchSize: b1 - b0,
      geometry: geometryOf(plan.mode, b1 - b0, Sq, Skv),
      positions: plan.positions ? plan.positions.subarray(b0 * Sq, b1 * Sq) : null,
      query,
      key: plan.mode === 'self' ? query : plan.key.subarray(b0 * Skv * kvWidth(plan.key), b1 * Skv * kvWidth(plan.key)),
      value: plan.mode === 'self' ? query : plan.value.subarray(b0 * Skv * kvWidth(plan.value), b1 * Skv * kvWidth(plan.value)),
      masks: sliceMasks(plan.masks, b0, b1, H, Sq, Skv),
    });
  }
  return plans;
}

/**
 * Concatenates the results of the chunks of one call, in order (a call in one piece: its result). Only
 * calls that read back are split (runtime.ts prepare refuses to split one with GPU buffers), so the
 * pieces of a split call are arrays.
 */
export function mergeResults(pieces: readonly (ForwardResult | BufferForwardResult)[]): ForwardResult | BufferForwardResult {
  if (pieces.length === 1) return pieces[0];
  const results = pieces as readonly ForwardResult[];
  const cat = (parts: Float32Array[]) => {
    const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let offset = 0;
    for (const p of parts) {
      out.set(p, offset);
      offset += p.length;
    }
    return out;
  };
  const output = cat(results.map((r) => r.output));
  return results[0].attentionWeights ? { output, attentionWeights: cat(results.map((r) => r.attentionWeights!)) } : { output };
}
