// WebGPU's error scopes around one piece of synchronous work: the one way the engine asks WebGPU whether
// it accepted what a call (call.ts), a tuning trial (tuning/trial.ts), a KV cache's read or write
// (kv-cache.ts) or a layer's weight upload (weights.ts) did. Error scopes are a per-device stack and
// calls run concurrently, so the scopes are opened, the work runs and the scopes are closed with no
// `await` in between; what they caught is then a promise, awaited beside the work's own (submit.ts).

import type { WebGPUErrorScope } from '../errors.ts';

/** The scopes every piece of work runs in, in the order they are popped. */
export const ERROR_SCOPES: readonly WebGPUErrorScope[] = ['validation', 'out-of-memory', 'internal'];

/** What one scope caught. */
export interface CaughtError {
  scope: WebGPUErrorScope;
  message: string;
}

/**
 * Validation, out-of-memory and internal error scopes pushed on `device`, open until `close()`. Open
 * them, do the synchronous work, close them: nothing may await in between.
 */
export class ErrorScopes {
  private open = true;

  constructor(private readonly device: GPUDevice) {
    for (const scope of [...ERROR_SCOPES].reverse()) device.pushErrorScope(scope);
  }

  /** Pops the scopes (once); resolves to the first error they caught, null if none. A pop that fails (a lost device) rejects. */
  close(): Promise<CaughtError | null> {
    if (!this.open) throw new Error('ErrorScopes.close: the scopes were closed already (a fault in webgpu-attention)');
    this.open = false;
    const pops = ERROR_SCOPES.map((scope) => this.device.popErrorScope().then((error) => (error ? { scope, message: error.message } : null)));
    return Promise.all(pops).then((errors) => errors.find((e) => e !== null) ?? null);
  }

  /** Closes the scopes without asking what they caught: the work threw, and what it threw is the error reported. */
  discard(): void {
    this.close().catch(() => {});
  }

  /**
   * Closes the scopes around work that has no call of its own to reject (a weight upload, a KV cache's
   * allocation or write): what they caught, with `where` (what was refused), for every call that uses
   * what the work made to reject with (submit.ts); null if nothing. Never rejects (a pop that fails is a
   * lost device, which the calls meet on their own).
   */
  verdict(where: string): Verdict {
    return this.close().then(
      (caught) => (caught ? { where, ...caught } : null),
      () => null,
    );
  }
}

/** What WebGPU refused of earlier work that calls depend on: where, the scope, its message. */
export interface Refused extends CaughtError {
  where: string;
}

/** Whether WebGPU accepted earlier work (weight uploads, KV cache writes): null when it did. */
export type Verdict = Promise<Refused | null>;

/** The verdict of work that asked nothing of WebGPU. */
export const ACCEPTED: Verdict = Promise.resolve(null);
