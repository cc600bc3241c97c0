// One call's trip through the GPU, shared by forward.ts and attend.ts: encode → submit → read.
//
// Everything a call does to the device (taking scratch, uploads, encoding, the copy to a staging
// buffer, the submit) runs synchronously inside validation, out-of-memory and internal error scopes.
// Error scopes are a per-device stack and calls run concurrently, so they are pushed and popped with no
// `await` between; the pops' promises are then awaited together with the staging buffer's mapAsync.
// When a scope caught an error the call rejects (WebGPUCallError; a validation error in a call with
// the caller's own GPU buffers is the caller's InvalidArgumentError, as those are the likely culprit),
// its numbers are never read, the buffers made for returnBuffer are destroyed, and its scratch is
// destroyed rather than pooled (a buffer made when memory ran out is invalid; one a failed command
// buffer wrote half of must not be read by the next call). A KV cache is not advanced (layer.ts
// advances it only when the forward resolves).

import { InvalidArgumentError, ShapeMismatchError, WebGPUCallError, type WebGPUErrorScope } from '../errors.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { type BufferPool, MAP_MODE_READ, Usage } from './buffers.ts';
import { waitFor } from './completion.ts';
import { fromF16 } from './f16.ts';
import { encodeCopyRows } from './kernels/copy-tensor.ts';
import { cropColumns } from './padding.ts';
import { PassStages } from './profiler.ts';
import { inErrorScopes } from './scopes.ts';
import { CallScratch } from './scratch.ts';

/** What a call's encode step leaves for the output step. */
export interface CallOutput {
  /** The result [rows, cols] at the engine's precision (Y [B·Sq, E], or O [B·H·Sq, Dh]). */
  result: GPUBuffer;
  rows: number;
  cols: number;
  /** Columns the caller gets: `cols` unless padded (padding.ts), the rest cropped. */
  keepCols: number;
  /** P [B, H, Sq, Skv] f32 (needWeights), else null. */
  probs: GPUBuffer | null;
  probsBytes: number;
}

/** What the encode step works with; everything it does must be synchronous (it runs inside the error scopes). */
export interface CallContext {
  scratch: CallScratch;
  encoder: GPUCommandEncoder;
  stages: PassStages;
  /**
   * Where the kernel writing the result [rows, cols] should write: with returnBuffer and nothing to
   * crop, straight into the buffer the caller will own; else a scratch buffer.
   */
  resultTarget(rows: number, cols: number, keepCols: number, role: string): GPUBuffer;
}

export interface CallOptions {
  /** The API entry point, for messages and labels. */
  where: string;
  /** Whether the caller passed GPUBuffers (a validation error then names them). */
  callerBuffers: boolean;
  /** Leave the output (and probabilities) in new buffers the caller owns instead of reading them back. */
  returnBuffer: boolean;
  /** Time each stage (timestamp queries). */
  profile: boolean;
}

/**
 * Runs one call: `encode` (synchronous: takes scratch, writes inputs, adds the stages), then the
 * output (read back, or left in buffers the caller owns), checked by WebGPU's error scopes.
 */
export async function runCall(pool: BufferPool, options: CallOptions, encode: (ctx: CallContext) => CallOutput): Promise<ForwardResult | BufferForwardResult> {
  const { device } = pool;
  const { where } = options;
  const scratch = new CallScratch(pool);
  const owned: GPUBuffer[] = [];
  const own = (bytes: number, label: string) => {
    const b = device.createBuffer({ label, size: Math.max(16, Math.ceil(bytes / 4) * 4), usage: Usage.STORAGE | Usage.COPY_SRC | Usage.COPY_DST });
    owned.push(b);
    return b;
  };
  let stages = null as PassStages | null;
  const run = inErrorScopes(device, () => {
    const encoder = device.createCommandEncoder({ label: where });
    stages = new PassStages(device, encoder, where, options.profile);
    const direct: { buffer: GPUBuffer | null } = { buffer: null }; // the caller's output buffer, when the kernel writes it
    const ctx: CallContext = {
      scratch,
      encoder,
      stages,
      resultTarget: (rows, cols, keepCols, role) => {
        if (options.returnBuffer && cols === keepCols) {
          direct.buffer = own(rows * cols * scratch.elementBytes, `${where}.outputBuffer`);
          return direct.buffer;
        }
        return scratch.storage(rows * cols * scratch.elementBytes, role);
      },
    };
    const out = encode(ctx);
    return submit(ctx, out, options, own, direct.buffer);
  });
  const submitted = run.ok ? (run.value as Submitted) : null;
  const staging = submitted?.staging ?? null;
  const mapping = staging ? waitFor(device, staging.buffer.mapAsync(MAP_MODE_READ, 0, staging.bytes)) : Promise.resolve();
  const [caught, mapped] = await Promise.allSettled([run.caught, mapping]);
  stages?.destroyAfter(submitted ? device.queue : null);
  let ok = false;
  try {
    if (!run.ok) throw run.thrown;
    if (caught.status === 'rejected') throw caught.reason;
    if (caught.value) throw refusal(options, caught.value.scope, caught.value.message);
    if (mapped.status === 'rejected') throw mapped.reason;
    const s = submitted as Submitted;
    const result = s.buffers ?? readResult(s, staging!);
    ok = true;
    return result;
  } finally {
    if (staging?.buffer.mapState === 'mapped') staging.buffer.unmap();
    if (ok) scratch.releaseAll();
    else {
      for (const b of owned) b.destroy();
      scratch.destroyAll();
    }
  }
}

interface Submitted {
  /** With returnBuffer: the caller's new buffers. */
  buffers: BufferForwardResult | null;
  staging: { buffer: GPUBuffer; bytes: number } | null;
  /** What was copied into the staging buffer, in order. */
  reads: { bytes: number; f16?: boolean; kind: 'result' | 'probs' | 'timestamps' }[];
  out: CallOutput;
  stages: PassStages;
}

/** The output step: crop or copy into the caller's buffers, or copy to one staging buffer; then the submit. */
function submit(
  ctx: CallContext,
  out: CallOutput,
  options: CallOptions,
  own: (bytes: number, label: string) => GPUBuffer,
  /** The caller's output buffer if the kernel wrote into it (CallContext.resultTarget). */
  direct: GPUBuffer | null,
): Submitted {
  const { scratch, encoder, stages } = ctx;
  const { where } = options;
  const el = scratch.elementBytes;
  const resultBytes = out.rows * out.cols * el;
  if (options.returnBuffer) {
    // The output (and probabilities) in new buffers the caller owns: no readback.
    const inPlace = direct !== null && direct === out.result;
    const outputBuffer = inPlace ? direct : own(out.rows * out.keepCols * el, `${where}.outputBuffer`);
    const crop = !inPlace && out.keepCols !== out.cols;
    if (crop) stages.run('crop_output', (pass) => encodeCopyRows(pass, scratch, out.result, outputBuffer, { rows: out.rows, srcCols: out.cols, dstCols: out.keepCols }));
    stages.end(scratch);
    if (!inPlace && !crop) encoder.copyBufferToBuffer(out.result, 0, outputBuffer, 0, resultBytes);
    const weightsBuffer = out.probs ? own(out.probsBytes, `${where}.attentionWeightsBuffer`) : null;
    if (out.probs && weightsBuffer) encoder.copyBufferToBuffer(out.probs, 0, weightsBuffer, 0, out.probsBytes);
    scratch.device.queue.submit([encoder.finish()]);
    const buffers = weightsBuffer ? { outputBuffer, attentionWeightsBuffer: weightsBuffer } : { outputBuffer };
    return { buffers, staging: null, reads: [], out, stages };
  }
  const timestamps = stages.end(scratch);
  const reads: Submitted['reads'] = [{ bytes: resultBytes, f16: el === 2, kind: 'result' }];
  const sources = [out.result];
  if (out.probs) {
    reads.push({ bytes: out.probsBytes, kind: 'probs' });
    sources.push(out.probs);
  }
  if (timestamps) {
    reads.push({ bytes: timestamps.bytes, kind: 'timestamps' });
    sources.push(timestamps.buffer);
  }
  const total = reads.reduce((a, r) => a + r.bytes, 0);
  const staging = scratch.readback(total, 'readback');
  let offset = 0;
  reads.forEach((r, i) => {
    encoder.copyBufferToBuffer(sources[i], 0, staging, offset, r.bytes);
    offset += r.bytes;
  });
  scratch.device.queue.submit([encoder.finish()]);
  return { buffers: null, staging: { buffer: staging, bytes: total }, reads, out, stages };
}

/** The mapped staging buffer as the call's result (copies: the buffer goes back to the pool). */
function readResult(s: Submitted, staging: { buffer: GPUBuffer; bytes: number }): ForwardResult {
  const mapped = staging.buffer.getMappedRange(0, staging.bytes);
  let offset = 0;
  const result: ForwardResult = { output: new Float32Array(0) };
  for (const r of s.reads) {
    const bytes = mapped.slice(offset, offset + r.bytes);
    offset += r.bytes;
    if (r.kind === 'result') {
      const values = r.f16 ? fromF16(new Uint16Array(bytes)) : new Float32Array(bytes);
      result.output = cropColumns(values, s.out.rows, s.out.cols, s.out.keepCols);
    } else if (r.kind === 'probs') result.attentionWeights = new Float32Array(bytes);
    else result.timings = s.stages.timings(bytes);
  }
  return result;
}

/** The error a call rejects with when the error scope `scope` caught `message`. */
function refusal(options: CallOptions, scope: WebGPUErrorScope, message: string): Error {
  if (scope === 'validation' && options.callerBuffers) {
    // A caller's buffer from another device, or of the wrong kind, is a validation error.
    return new InvalidArgumentError({
      where: options.where,
      argument: 'a GPUBuffer input',
      expected: "a buffer of this engine's device (engine.device) with STORAGE usage",
      given: `one WebGPU refused: ${message.split('\n')[0]}`,
      fix: 'Create input buffers on engine.device, or pass your device to createAttentionEngine({ device }).',
    });
  }
  return new WebGPUCallError(options.where, scope, message);
}

/**
 * GPU-resident inputs must hold their tensors at the engine's precision (4 bytes an element, or 2 with
 * f16): each [argument, buffer (or undefined), shape in words, elements].
 */
export function checkBufferSizes(where: string, el: number, inputs: readonly (readonly [string, GPUBuffer | null | undefined, string, number])[]): void {
  const type = el === 2 ? "float16 (the engine's precision is f16)" : 'float32';
  for (const [argument, buffer, shape, n] of inputs) {
    if (buffer && buffer.size < n * el) {
      throw new ShapeMismatchError({ where, argument, expected: `a GPUBuffer of at least ${n * el} bytes (${shape} ${type})`, given: `${buffer.size} bytes` });
    }
  }
}
