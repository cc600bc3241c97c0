// One call on the GPU, made by forward.ts and attend.ts: encode → submit → read, in that order, as the
// code reads.
//
// `new GpuCall(...)` opens the call's validation, out-of-memory and internal error scopes and creates its
// command encoder; `stage(name)` returns the compute pass that stage is encoded into, there and then
// (one pass for all stages; with profiling, a pass each, timed: profiler.ts); `finish(output)` encodes
// the output step (the result cropped or copied into buffers the caller will own, for returnBuffer; else
// the result, the probabilities and the timestamps copied into one staging buffer) and hands the command
// buffer to submitAndRead (submit.ts), which submits it, closes the scopes and reads. Error scopes are a
// per-device stack and calls run concurrently, so everything from the GpuCall's making to finish() is
// synchronous; the encoder never outlives the call.
//
// When a scope caught an error (or a weight upload or KV cache write the call reads was refused, or
// encoding threw: `fail`), the call rejects (WebGPUCallError; a validation error in a call with the
// caller's own GPU buffers is the caller's InvalidArgumentError, as those are the likely culprit), its
// numbers are never read, the buffers made for returnBuffer are destroyed, and its scratch is destroyed
// rather than pooled (a buffer made when memory ran out is invalid; one a failed command buffer wrote
// half of must not be read by the next call). A KV cache is not advanced (layer.ts advances it only when
// the forward resolves).

import { ShapeMismatchError } from '../errors.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { type BufferPool, Usage } from './buffers.ts';
import { fromF16 } from '../util/f16.ts';
import { encodeCopyRows } from './kernels/copy-tensor.ts';
import { cropColumns } from './padding.ts';
import { StageTimestamps } from './profiler.ts';
import { ErrorScopes, type Verdict } from './scopes.ts';
import { CallScratch } from './scratch.ts';
import { submitAndRead, type Wait } from './submit.ts';

/** What a call's encoding leaves for the output step. */
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

export interface CallOptions {
  /** The API entry point, for messages and labels. */
  where: string;
  /** Whether the caller passed GPUBuffers (a validation error then names them). */
  callerBuffers: boolean;
  /** Leave the output (and probabilities) in new buffers the caller owns instead of reading them back. */
  returnBuffer: boolean;
  /** Time each stage (timestamp queries; not with returnBuffer, which reads nothing back). */
  profile: boolean;
  /** Verdicts of earlier work the call reads (the layer's weight upload, the KV cache's writes: scopes.ts). */
  after: readonly Verdict[];
}

/** One part of the staging buffer: what was copied there, in order. */
interface ReadPart {
  kind: 'result' | 'probs' | 'timestamps';
  source: GPUBuffer;
  bytes: number;
}

/** What the output step encoded: the caller's new buffers (returnBuffer), or the parts of the staging buffer to read. */
interface Output {
  buffers: BufferForwardResult | null;
  reads: ReadPart[];
  wait: Wait;
}

export class GpuCall {
  readonly scratch: CallScratch;
  private readonly device: GPUDevice;
  private readonly scopes: ErrorScopes;
  private readonly encoder: GPUCommandEncoder;
  private readonly timestamps: StageTimestamps | null = null;
  /** The pass stages are encoded into now; null before the first and after the last. */
  private pass: GPUComputePassEncoder | null = null;
  /** The stage `pass` belongs to (with timestamps, a stage asked for again at once continues its pass). */
  private passStage = '';
  /** Buffers made for the caller (returnBuffer): destroyed if the call fails. */
  private readonly owned: GPUBuffer[] = [];
  /** The caller's output buffer, when the kernel writing the result writes it directly (resultTarget). */
  private direct: GPUBuffer | null = null;

  constructor(
    pool: BufferPool,
    private readonly options: CallOptions,
  ) {
    this.device = pool.device;
    this.scopes = new ErrorScopes(this.device); // first: all the call does to the device is checked
    this.scratch = new CallScratch(pool);
    try {
      this.encoder = this.device.createCommandEncoder({ label: options.where });
      if (options.profile && !options.returnBuffer) this.timestamps = new StageTimestamps(this.device, options.where);
    } catch (e) {
      this.scopes.discard();
      throw e;
    }
  }

  /**
   * The compute pass to encode the stage `name` into, now: without profiling the call's one pass;
   * with it, a pass of the stage's own that writes timestamps at its beginning and its end.
   */
  stage(name: string): GPUComputePassEncoder {
    if (this.pass && (!this.timestamps || this.passStage === name)) return this.pass;
    this.pass?.end();
    this.passStage = name;
    this.pass = this.encoder.beginComputePass(this.timestamps ? this.timestamps.pass(name) : { label: `${this.options.where}.pass` });
    return this.pass;
  }

  /**
   * Where the kernel writing the result [rows, cols] should write: with returnBuffer and nothing to
   * crop, straight into the buffer the caller will own; else a scratch buffer.
   */
  resultTarget(rows: number, cols: number, keepCols: number, role: string): GPUBuffer {
    const bytes = rows * cols * this.scratch.elementBytes;
    if (!this.options.returnBuffer || cols !== keepCols) return this.scratch.storage(bytes, role);
    this.direct = this.own(bytes, `${this.options.where}.outputBuffer`);
    return this.direct;
  }

  /**
   * The output step, then the submit and the read (submit.ts): resolves to the output read back, or
   * to the caller's new buffers (returnBuffer). Never throws: every failure is the promise's rejection.
   */
  finish(out: CallOutput): Promise<ForwardResult | BufferForwardResult> {
    let commands: GPUCommandBuffer;
    let output: Output;
    try {
      output = this.options.returnBuffer ? { buffers: this.encodeCallerBuffers(out), reads: [], wait: 'verdict' } : this.encodeReadback(out);
      commands = this.encoder.finish();
    } catch (e) {
      return this.fail(e);
    }
    return this.submit(commands, output, out);
  }

  /** A call whose encoding threw: its scopes closed, what it made destroyed, the promise rejected with `thrown`. */
  fail(thrown: unknown): Promise<never> {
    this.scopes.discard();
    this.end(false);
    return Promise.reject(thrown);
  }

  private async submit(commands: GPUCommandBuffer, output: Output, out: CallOutput): Promise<ForwardResult | BufferForwardResult> {
    let ok = false;
    try {
      const { where, callerBuffers, after } = this.options;
      const { parts } = await submitAndRead(this.device, this.scopes, commands, output.wait, { where, callerBuffers, after });
      const result = output.buffers ?? this.readResult(output.reads, parts, out);
      ok = true;
      return result;
    } finally {
      this.end(ok);
    }
  }

  /** Crop or copy the output (and the probabilities) into new buffers the caller owns: no readback. */
  private encodeCallerBuffers(out: CallOutput): BufferForwardResult {
    const { where } = this.options;
    const el = this.scratch.elementBytes;
    const inPlace = this.direct !== null && this.direct === out.result;
    const outputBuffer = inPlace ? out.result : this.own(out.rows * out.keepCols * el, `${where}.outputBuffer`);
    const crop = !inPlace && out.keepCols !== out.cols;
    if (crop) encodeCopyRows(this.stage('crop_output'), this.scratch, out.result, outputBuffer, { rows: out.rows, srcCols: out.cols, dstCols: out.keepCols });
    this.endPass();
    if (!inPlace && !crop) this.encoder.copyBufferToBuffer(out.result, 0, outputBuffer, 0, out.rows * out.cols * el);
    if (!out.probs) return { outputBuffer };
    const attentionWeightsBuffer = this.own(out.probsBytes, `${where}.attentionWeightsBuffer`);
    this.encoder.copyBufferToBuffer(out.probs, 0, attentionWeightsBuffer, 0, out.probsBytes);
    return { outputBuffer, attentionWeightsBuffer };
  }

  /** Copies the result, the probabilities and the timestamps into one staging buffer, in that order. */
  private encodeReadback(out: CallOutput): Output {
    this.endPass();
    const reads: ReadPart[] = [{ kind: 'result', source: out.result, bytes: out.rows * out.cols * this.scratch.elementBytes }];
    if (out.probs) reads.push({ kind: 'probs', source: out.probs, bytes: out.probsBytes });
    const timestamps = this.timestamps?.resolve(this.encoder, this.scratch);
    if (timestamps) reads.push({ kind: 'timestamps', source: timestamps.buffer, bytes: timestamps.bytes });
    const total = reads.reduce((a, r) => a + r.bytes, 0);
    const staging = this.scratch.readback(total, 'readback');
    let offset = 0;
    for (const r of reads) {
      this.encoder.copyBufferToBuffer(r.source, 0, staging, offset, r.bytes);
      offset += r.bytes;
    }
    return { buffers: null, reads, wait: { staging, parts: reads.map((r) => r.bytes) } };
  }

  /** The staging buffer's parts as the call's result. */
  private readResult(reads: ReadPart[], parts: ArrayBuffer[], out: CallOutput): ForwardResult {
    const result: ForwardResult = { output: new Float32Array(0) };
    reads.forEach((r, i) => {
      const bytes = parts[i];
      if (r.kind === 'result') {
        const values = this.scratch.elementBytes === 2 ? fromF16(new Uint16Array(bytes)) : new Float32Array(bytes);
        result.output = cropColumns(values, out.rows, out.cols, out.keepCols);
      } else if (r.kind === 'probs') result.attentionWeights = new Float32Array(bytes);
      else result.timings = this.timestamps?.timings(bytes);
    });
    return result;
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = null;
  }

  private own(bytes: number, label: string): GPUBuffer {
    const buffer = this.device.createBuffer({ label, size: Math.max(16, Math.ceil(bytes / 4) * 4), usage: Usage.STORAGE | Usage.COPY_SRC | Usage.COPY_DST });
    this.owned.push(buffer);
    return buffer;
  }

  /**
   * What the call made goes: scratch back to the pool when it succeeded, destroyed (with the caller's
   * new buffers) when it failed; the query set either way (its work is done, or was never submitted).
   */
  private end(ok: boolean): void {
    this.timestamps?.destroy();
    if (ok) this.scratch.releaseAll();
    else {
      for (const b of this.owned) b.destroy();
      this.scratch.destroyAll();
    }
  }
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
