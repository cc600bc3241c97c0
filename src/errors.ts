// Errors are part of the API. Each kind of misuse has its own class, and every message says
// where it happened, which argument was wrong, what was expected, what was given, and how to fix it:
//
//   MultiHeadAttention.forward: query.length must be batchSize·seqLen·embedDim = 2·128·512 = 131072;
//   got 65536. Pass a Float32Array laid out [batchSize, seqLen, embedDim] (batch first).

/** Base class of every error this engine throws on purpose. */
export class AttentionError extends Error {
  override name = 'AttentionError';
}

export interface ArgumentProblem {
  /** The API entry point, e.g. `createMultiHeadAttention`. */
  where: string;
  /** The argument or option, e.g. `config.numHeads` or `stateDict["in_proj_weight"]`. */
  argument: string;
  /** What was expected, in words or with the formula. */
  expected: string;
  /** What was given. */
  given: string;
  /** How to fix it (optional). */
  fix?: string;
}

function formatProblem(p: ArgumentProblem): string {
  return `${p.where}: ${p.argument} must be ${p.expected}; got ${p.given}.${p.fix ? ` ${p.fix}` : ''}`;
}

/** Base of the errors about one argument; `argument` names it, e.g. `config.numHeads`. */
export class ArgumentError extends AttentionError {
  override name = 'ArgumentError';
  /** The argument or option that was wrong. */
  readonly argument: string;
  constructor(problem: ArgumentProblem) {
    super(formatProblem(problem));
    this.argument = problem.argument;
  }
}

/** An argument of the wrong type or an invalid value (a size that is not a positive integer, an unknown option). */
export class InvalidArgumentError extends ArgumentError {
  override name = 'InvalidArgumentError';
}

/** A tensor whose length does not match the shape it must have. */
export class ShapeMismatchError extends ArgumentError {
  override name = 'ShapeMismatchError';
}

/** A state_dict that lacks an entry the layer needs. */
export class MissingWeightError extends ArgumentError {
  override name = 'MissingWeightError';
}

/** A valid request this engine does not do (dropout, or a head size the WebGPU kernels do not take). */
export class UnsupportedError extends ArgumentError {
  override name = 'UnsupportedError';
}

/** A call whose buffers or dispatches exceed what the device allows. */
export class DeviceLimitError extends ArgumentError {
  override name = 'DeviceLimitError';
}

/** A layer or engine used after `dispose()`. */
export class DisposedError extends AttentionError {
  override name = 'DisposedError';
  constructor(what: string, fix: string) {
    super(`${what} was used after dispose(). ${fix}`);
  }
}

/** WebGPU was asked for but there is no adapter (no `navigator.gpu`, no `webgpu` package, no driver). */
export class WebGPUUnavailableError extends AttentionError {
  override name = 'WebGPUUnavailableError';
}

/**
 * The GPU device was lost (driver reset, tab backgrounded, destroy()) while a call was in flight, or
 * it cannot be replaced (a device the caller gave). The engine recreates an engine-owned device on the
 * next call; `reason` is WebGPU's GPUDeviceLostReason ('destroyed' or 'unknown').
 */
export class DeviceLostError extends AttentionError {
  override name = 'DeviceLostError';
  constructor(
    message: string,
    readonly reason: string,
  ) {
    super(message);
  }
}
