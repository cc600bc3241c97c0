// A tuning trial: one kernel variant, alone in its own command buffer, on buffers of the call's shape
// that belong to the trial (not to any call), timed by timestamp queries around its pass where the
// device has them, else from submit to onSubmittedWorkDone (trialClock). The values in
// those buffers are whatever the pool's scratch held (the kernels do the same work whatever the
// values); masks are the call's own, since they decide how much work there is.

import { geometryOf } from '../../plan/geometry.ts';
import type { ForwardPlan } from '../../plan/index.ts';
import { type BufferPool, Usage } from '../buffers.ts';
import { encodeFlashAttention } from '../kernels/flash-attention.ts';
import { uploadMasks } from '../kernels/masks.ts';
import { encodeOutputProjection } from '../kernels/output-projection.ts';
import { formatsOf, type GpuWeight, type WeightFormat } from '../kernels/packed-weight.ts';
import { encodeQkvProjection, type KvTarget, type ProjectionWeights, qkvBufferTargets, qkvLayout } from '../kernels/qkv-projection.ts';
import type { KvFormat } from '../kernels/attention-fields.ts';
import { cacheFormat } from '../kernels/index.ts';
import { completionInfo, NUDGE_MAX_INTERVAL_MS } from '../completion.ts';
import { CallScratch } from '../scratch.ts';
import { ErrorScopes } from '../scopes.ts';
import { submitAndRead } from '../submit.ts';
import type { AttentionVariant, KernelName, ProjectionVariant } from '../variants.ts';
import type { TrialClock } from './measure.ts';

/**
 * Rows a trial computes: a kernel's time per row hardly depends on how many rows there are past a
 * few hundred, so big calls are timed on their first rows (a sweep stays short at S = 8192; each row
 * of attention still sees all its keys).
 */
export const TRIAL_ROWS = 512;

/** The call's shape without what ties it to the caller (a KV cache, GPU buffers, weights to return). */
function trialPlan(plan: ForwardPlan): ForwardPlan {
  return { ...plan, cache: null, gpu: null, returnBuffer: false, needWeights: false };
}

/**
 * The call an attention trial runs. Where every row sees all keys, the call's first TRIAL_ROWS rows
 * stand for all of them. Under a causal mask or a window, row i sees about i keys, so the first rows
 * of a long call see few and time a different kernel than the call runs: a sweep kept a kernel that is
 * 10% slower at S = 2048 causal because its first 512 rows were as fast (docs/PERFORMANCE.md). So a
 * long call of that kind is timed on the TRIAL_ROWS rows around its middle, which see on average as
 * many keys as the call's rows do: as a call of TRIAL_ROWS queries over the keys up to the end of
 * those rows (the kernels align queries with the last keys, as a KV cache's do). Calls whose masks
 * are data of the call's shape (attnMask, key padding) and varlen batches keep their first rows.
 */
export function attentionTrialPlan(plan: ForwardPlan): ForwardPlan {
  const p = trialPlan(plan);
  const banded = p.isCausal || p.masks.window > 0;
  const fixedMasks = p.masks.attnMask !== null || p.masks.keyPaddingMask !== null;
  if (!banded || fixedMasks || p.mode === 'varlen' || p.seqLen !== p.kvSeqLen || p.seqLen <= TRIAL_ROWS) return p;
  const seqLen = TRIAL_ROWS;
  const kvSeqLen = Math.floor(p.seqLen / 2) + TRIAL_ROWS / 2;
  return { ...p, mode: 'cross', seqLen, kvSeqLen, geometry: geometryOf('cross', p.geometry.sequences, seqLen, kvSeqLen) };
}

/**
 * How trials are timed on `device`: by timestamp queries around the trial's pass where the device has
 * `timestamp-query` (the GPU's own clock: no submission, readback or completion-timer time in it), else
 * by the wall clock from submit to onSubmittedWorkDone. `stepMs` is the wall clock's known granularity
 * on this implementation (completion.ts: a timer-driven one only notices finished work at its nudges or
 * its timer), 0 where none is known.
 */
export function trialClock(device: GPUDevice): TrialClock {
  if (device.features.has('timestamp-query')) return { kind: 'gpu-timestamps', stepMs: 0 };
  const c = completionInfo(device);
  return { kind: 'wall-clock', stepMs: c.timerDriven ? (c.nudged ? NUDGE_MAX_INTERVAL_MS : (c.probeMs ?? 0)) : 0 };
}

/**
 * Milliseconds of `kernel` as `variant`, run `repeat` times in one pass, on buffers shaped like
 * `plan`'s: GPU time by timestamps where the device has them (trialClock), else wall time.
 */
export async function timeKernel(pool: BufferPool, plan: ForwardPlan, kernel: KernelName, variant: string, repeat = 1): Promise<number> {
  const device = pool.device;
  const scratch = new CallScratch(pool);
  // Its own error scopes (scopes.ts): a variant WebGPU refuses is the sweep's recorded failure, never an
  // error in a user's call.
  const scopes = new ErrorScopes(device);
  let querySet: GPUQuerySet | null = null;
  let ok = false;
  try {
    let commands: GPUCommandBuffer;
    let staging: GPUBuffer | null = null;
    try {
      const encoder = device.createCommandEncoder({ label: 'Tuner.trial' });
      if (trialClock(device).kind === 'gpu-timestamps') querySet = device.createQuerySet({ label: 'Tuner.trial.timestamps', type: 'timestamp', count: 2 });
      const pass = encoder.beginComputePass({
        label: 'Tuner.trial',
        ...(querySet ? { timestampWrites: { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } } : {}),
      });
      encodeTrial(pass, scratch, plan, kernel, variant, repeat);
      pass.end();
      if (querySet) {
        const resolved = scratch.buffer(16, Usage.QUERY_RESOLVE | Usage.COPY_SRC, 'tuning.timestamps');
        staging = scratch.readback(16, 'tuning.timestamps.read');
        encoder.resolveQuerySet(querySet, 0, 2, resolved, 0);
        encoder.copyBufferToBuffer(resolved, 0, staging, 0, 16);
      }
      commands = encoder.finish();
    } catch (e) {
      scopes.discard();
      throw e;
    }
    const wait = staging ? { staging, parts: [16] } : 'work-done';
    const { parts, ms } = await submitAndRead(device, scopes, commands, wait, { where: `Tuner.trial (${kernel} ${variant})` });
    ok = true;
    // A timestamp pair that says nothing (0, or reversed: some implementations quantize or zero them) falls back to the wall clock.
    const gpu = parts.length > 0 ? gpuMs(parts[0]) : 0;
    return gpu > 0 ? gpu : ms;
  } finally {
    (querySet as GPUQuerySet | null)?.destroy();
    if (ok) scratch.releaseAll();
    else scratch.destroyAll();
  }
}

/** K and V [blocks, stride, Dh] stored as `format`, laid out as kv-cache.ts keeps a cache of `stride` positions. */
function trialKv(scratch: CallScratch, format: KvFormat, blocks: number, stride: number, Dh: number): KvTarget {
  const rows = blocks * stride;
  if (format === 'q8_0' || format === 'q4_0') {
    const halfWords = (rows * Dh) / (format === 'q8_0' ? 4 : 8);
    const words = 2 * halfWords + (rows * Dh) / 32;
    return { buffer: scratch.storage(4 * words, 'tuning.kv'), kBase: 0, vBase: rows * Dh, stride, row0: 0, format, scales: 2 * halfWords };
  }
  const el = format === 'f32' ? 4 : 2;
  return { buffer: scratch.storage(2 * rows * Dh * el, 'tuning.kv'), kBase: 0, vBase: rows * Dh, stride, row0: 0, format };
}

/** The pass's duration from its two timestamps (ns). */
function gpuMs(bytes: ArrayBuffer): number {
  const [begin, end] = new BigUint64Array(bytes);
  return Number(end - begin) / 1e6;
}

/** Takes the trial's buffers and encodes `repeat` runs of `kernel` as `variant` into `pass` (synchronous: it runs inside the error scopes). */
function encodeTrial(pass: GPUComputePassEncoder, scratch: CallScratch, plan: ForwardPlan, kernel: KernelName, variant: string, repeat: number): void {
  const p = kernel === 'flash_attention' ? attentionTrialPlan(plan) : trialPlan(plan);
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh, kdim, vdim } = p.layer;
  const { tokens, batches, kvRows } = p.geometry;
  const el = scratch.elementBytes;
  const storage = (elements: number, role: string) => scratch.storage(elements * el, `tuning.${role}`);
  // A weight [rows, K] in the layer's format: float, or packed (quants [rows, wordsPerRow] u32, scaleOffset [rows, groups] vec2<f32>).
  const weight = (format: WeightFormat | null, rows: number, K: number, role: string): GpuWeight =>
    format
      ? {
          format,
          quants: scratch.storage(rows * Math.ceil((K * format.bits) / 32) * 4, `tuning.${role}.quants`),
          scaleOffset: scratch.storage(rows * Math.ceil(K / format.group) * 8, `tuning.${role}.scaleOffset`),
        }
      : storage(rows * K, role);
  const qkv = qkvBufferTargets(p, storage(qkvLayout(p).total, 'qkv'));
  const attention = storage(tokens * H * Dh, 'attention'); // O [B, H, S, Dh] (H·Dh ≠ E with config.headDim)
  if (kernel === 'qkv_projection') {
    const N = (H + 2 * G) * Dh;
    const query = storage(tokens * E, 'query');
    const key = p.mode === 'cross' ? storage(batches * kvRows * kdim, 'key') : query;
    const value = p.mode === 'cross' ? storage(batches * kvRows * vdim, 'value') : query;
    const bias = storage(N, 'bias');
    const f = formatsOf(p.layer).qkv;
    const weights: ProjectionWeights =
      kdim === E && vdim === E && f.length === 1
        ? { inProj: weight(f[0], N, E, 'in_proj_weight'), bias }
        : {
            q: weight(f[0], H * Dh, E, 'q_proj_weight'),
            k: weight(f[1] ?? null, G * Dh, kdim, 'k_proj_weight'),
            v: weight(f[2] ?? null, G * Dh, vdim, 'v_proj_weight'),
            bias,
          };
    for (let i = 0; i < repeat; i++) encodeQkvProjection(pass, scratch, p, { query, key, value }, weights, qkv, variant as ProjectionVariant, TRIAL_ROWS);
    return;
  }
  if (kernel === 'flash_attention') {
    const masks = uploadMasks(scratch, p);
    const rowStats = scratch.storage(batches * H * p.geometry.qRows * 8, 'tuning.rowStats');
    // A KV cache kept as another type: the variant reads K and V of that format (kv-cache.ts's layout; contents left as the pool had them).
    const format = cacheFormat(p, scratch.precision);
    const kv = format ? trialKv(scratch, format, batches * G, kvRows, Dh) : qkv.kv;
    const buffers = { q: qkv.q, kv, attention, rowStats };
    for (let i = 0; i < repeat; i++) encodeFlashAttention(pass, scratch, p, buffers, masks, variant as AttentionVariant, TRIAL_ROWS);
    return;
  }
  const weightO = weight(formatsOf(p.layer).out, E, H * Dh, 'out_proj.weight'); // [E, H·Dh]
  const bias = storage(E, 'out_proj.bias');
  const y = storage(tokens * E, 'y');
  for (let i = 0; i < repeat; i++) encodeOutputProjection(pass, scratch, p, { attention, weight: weightO, bias, y }, variant as ProjectionVariant, TRIAL_ROWS);
}
