// Submit and read: the one place in src/ where work meets the queue and a staging buffer is mapped.
// Every call goes through it: forward, scaledDotProductAttention and linearAttention (call.ts GpuCall),
// the tuning gates (forwards), a KV cache's read (kv-cache.ts) and a tuning trial (tuning/trial.ts).
//
// The work was encoded inside error scopes (scopes.ts) opened when it began; here the command buffer is
// submitted and the scopes closed, with no `await` in between, then the scopes' verdict, the verdicts of
// earlier work the call depends on (a layer's weight upload, a KV cache's write) and the map (or the
// queue's completion) are awaited together, nudged where completion is timer-driven (completion.ts).
// When any verdict says WebGPU refused something, the call rejects and nothing is read: numbers WebGPU
// refused to compute are never returned.

import { InvalidArgumentError, WebGPUCallError } from '../errors.ts';
import { MAP_MODE_READ } from './buffers.ts';
import { waitFor } from './completion.ts';
import type { CaughtError, ErrorScopes, Verdict } from './scopes.ts';

/** What to wait for after the submit, beside the verdicts. */
export type Wait =
  /** Map `staging` and copy out its `parts` (byte lengths, one after the other from offset 0). */
  | { staging: GPUBuffer; parts: readonly number[] }
  /** The queue's completion of the work (onSubmittedWorkDone): a trial timed by the wall clock. */
  | 'work-done'
  /** Nothing more: the output stays on the GPU (returnBuffer). */
  | 'verdict';

export interface SubmitOptions {
  /** The API entry point a rejection names. */
  where: string;
  /** Whether the caller passed GPUBuffers: a validation error then names them (InvalidArgumentError). */
  callerBuffers?: boolean;
  /** Verdicts of earlier work the call reads (weight uploads, cache writes): a refused one is the call's rejection. */
  after?: readonly Verdict[];
}

export interface Read {
  /** Copies of the staging buffer's parts (it is unmapped again); none unless a staging buffer was waited for. */
  parts: ArrayBuffer[];
  /** Wall milliseconds from the submit until the map or the queue's work was done (0 when neither was waited for). */
  ms: number;
}

/**
 * Submits `commands` (encoded while `scopes` were open), closes the scopes, and resolves once WebGPU
 * accepted the work (and everything in `options.after`) and `wait` is done. Rejects with
 * WebGPUCallError naming what was refused (the caller's InvalidArgumentError for a validation error in
 * a call with its own GPU buffers), or with what the map rejected with (a lost device). Runs
 * synchronously up to the submit, the scopes' closing and the map's start.
 */
export async function submitAndRead(device: GPUDevice, scopes: ErrorScopes, commands: GPUCommandBuffer, wait: Wait, options: SubmitOptions): Promise<Read> {
  const t0 = performance.now();
  try {
    device.queue.submit([commands]);
  } catch (e) {
    scopes.discard();
    throw e;
  }
  const caught = scopes.close();
  const staging = typeof wait === 'object' ? wait : null;
  const bytes = staging ? staging.parts.reduce((a, b) => a + b, 0) : 0;
  const done =
    wait === 'verdict'
      ? Promise.resolve(0)
      : waitFor(device, staging ? staging.staging.mapAsync(MAP_MODE_READ, 0, bytes) : device.queue.onSubmittedWorkDone()).then(() => performance.now() - t0);
  const [earlier, verdict, settled] = await Promise.allSettled([Promise.all(options.after ?? []), caught, done]);
  try {
    // Earlier work first: a weight upload WebGPU refused is why this call's work failed too.
    const refused = earlier.status === 'fulfilled' ? earlier.value.find((r) => r !== null) : null;
    if (refused) throw new WebGPUCallError(refused.where, refused.scope, refused.message);
    if (verdict.status === 'rejected') throw verdict.reason;
    if (verdict.value) throw refusal(options, verdict.value);
    if (settled.status === 'rejected') throw settled.reason;
    const parts: ArrayBuffer[] = [];
    if (staging) {
      const mapped = staging.staging.getMappedRange(0, bytes);
      let offset = 0;
      for (const n of staging.parts) {
        parts.push(mapped.slice(offset, offset + n));
        offset += n;
      }
    }
    return { parts, ms: settled.value };
  } finally {
    if (staging?.staging.mapState === 'mapped') staging.staging.unmap();
  }
}

/** The error a call rejects with when its scopes caught `caught`. */
function refusal(options: SubmitOptions, caught: CaughtError): Error {
  if (caught.scope === 'validation' && options.callerBuffers) {
    // A caller's buffer from another device, or of the wrong kind, is a validation error.
    return new InvalidArgumentError({
      where: options.where,
      argument: 'a GPUBuffer input',
      expected: "a buffer of this engine's device (engine.device) with STORAGE usage",
      given: `one WebGPU refused: ${caught.message.split('\n')[0]}`,
      fix: 'Create input buffers on engine.device, or pass your device to createAttentionEngine({ device }).',
    });
  }
  return new WebGPUCallError(options.where, caught.scope, caught.message);
}
