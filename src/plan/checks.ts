// Checks shared by the entry points: tensor arguments (arrays or GPU buffers), dropout, masks and windows.

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import type { ScoreMod } from '../types.ts';
import { describe, requirePositiveInteger } from '../validate.ts';
import { fromF16 } from '../util/f16.ts';
import { plainScore } from './make-plan.ts';
import type { MaskPlan, ScorePlan } from './types.ts';

const STORAGE_USAGE = 0x80; // GPUBufferUsage.STORAGE
const NO_DATA = new Float32Array(0);

export function isGpuBuffer(value: unknown): value is GPUBuffer {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as GPUBuffer).mapAsync === 'function' &&
    typeof (value as GPUBuffer).size === 'number' &&
    typeof (value as GPUBuffer).usage === 'number'
  );
}

/** The runtime's Float16Array (ES2025), or undefined (Node 20). */
const Float16 = (globalThis as { Float16Array?: new (...args: never[]) => ArrayLike<number> }).Float16Array;

/** Whether `value` is an array requireTensorArray takes (Float32Array, Uint16Array, Float16Array). */
export function isTensorArray(value: unknown): value is ArrayLike<number> & ArrayBufferView {
  return value instanceof Float32Array || value instanceof Uint16Array || (Float16 !== undefined && value instanceof Float16);
}

/**
 * A tensor array of `length` elements as float32: a Float32Array as it is, half precision (a
 * Uint16Array of IEEE binary16 bits, or a Float16Array) widened exactly. `shape` says how the length
 * is made, e.g. "[B, S, E] = [2, 3, 8] = 48".
 */
export function requireTensorArray(where: string, argument: string, value: unknown, length: number, shape: string): Float32Array {
  if (!isTensorArray(value)) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: `a Float32Array ${shape}, or half precision: a Uint16Array of IEEE binary16 bits${Float16 ? ' or a Float16Array' : ''}`,
      given: describe(value),
      fix:
        value instanceof Float64Array || Array.isArray(value)
          ? 'Convert it with Float32Array.from(...).'
          : 'Convert it with Float32Array.from(...); an Int16Array or another integer array is not half precision.',
    });
  }
  if (value.length !== length) {
    throw new ShapeMismatchError({ where, argument, expected: `of length ${shape}`, given: `length ${value.length}` });
  }
  if (value instanceof Float32Array) return value;
  return value instanceof Uint16Array ? fromF16(value) : Float32Array.from(value);
}

/**
 * A tensor argument: an array of `length` (requireTensorArray: float32, or half converted), or a
 * GPUBuffer holding at least that many elements at the engine's precision, with STORAGE usage.
 */
export function tensorInput(where: string, argument: string, value: unknown, length: number, shape: string): { host: Float32Array; gpu: GPUBuffer | null } {
  if (!isGpuBuffer(value)) return { host: requireTensorArray(where, argument, value, length, shape), gpu: null };
  if (!(value.usage & STORAGE_USAGE)) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: 'a GPUBuffer with GPUBufferUsage.STORAGE',
      given: `a buffer of usage 0x${value.usage.toString(16)}`,
      fix: 'Create it with usage STORAGE (| COPY_DST to fill it).',
    });
  }
  // Its size is checked by the WebGPU backend, which knows the element size (f32, or f16).
  return { host: NO_DATA, gpu: value };
}

/** options.outputType: 'f32' (default) or 'f16' (a Uint16Array of binary16 bits); not with returnBuffer. */
export function resolveOutputType(where: string, o: Record<string, unknown>): 'f32' | 'f16' {
  const value = o.outputType;
  if (value === undefined || value === 'f32') return 'f32';
  if (value !== 'f16') {
    throw new InvalidArgumentError({ where, argument: 'options.outputType', expected: "'f32', 'f16' or left out", given: describe(value) });
  }
  if (o.returnBuffer === true) {
    throw new UnsupportedError({
      where,
      argument: 'options.outputType',
      expected: 'left out with returnBuffer: true',
      given: "'f16'",
      fix: "A returned buffer holds the engine's precision (createAttentionEngine({ precision: 'f16' }) for float16 buffers); outputType applies to outputs read back.",
    });
  }
  return 'f16';
}

/**
 * Refuses the first of `names` that `o` gives (options this call cannot honour: packed-batch-only,
 * KV-cache or softmax-only ones): UnsupportedError on `options.<name>`, expected `expected`, with `fix(name)`.
 */
export function refuseGiven(where: string, o: Record<string, unknown>, names: readonly string[], expected: string, fix: (name: string) => string): void {
  for (const name of names) {
    if (o[name] === undefined) continue;
    throw new UnsupportedError({ where, argument: `options.${name}`, expected, given: describe(o[name]), fix: fix(name) });
  }
}

export function refuseDropout(where: string, argument: string, value: unknown): void {
  if (value === undefined || value === 0) return;
  throw new UnsupportedError({
    where,
    argument,
    expected: '0 or left out',
    given: describe(value),
    fix: 'This engine runs inference only and has no dropout (PyTorch applies none in eval() mode either).',
  });
}

export function requireUint8Array(where: string, argument: string, value: unknown, length: number, shape: string): Uint8Array {
  if (!(value instanceof Uint8Array)) {
    throw new InvalidArgumentError({ where, argument, expected: `a Uint8Array ${shape} (1 = masked out)`, given: describe(value) });
  }
  if (value.length !== length) throw new ShapeMismatchError({ where, argument, expected: `of length ${shape}`, given: `length ${value.length}` });
  return value;
}

/** attnMask: Float32Array (added) or Uint8Array (1 = not allowed), [Sq, Skv] or [B·H, Sq, Skv]. */
export function resolveAttnMask(where: string, value: unknown, B: number, H: number, Sq: number, Skv: number): { mask: Float32Array; perHead: boolean } {
  const shared = Sq * Skv;
  const perHead = B * H * Sq * Skv;
  const shapes = `[Sq, Skv] = [${Sq}, ${Skv}] = ${shared} or [B·H, Sq, Skv] = [${B * H}, ${Sq}, ${Skv}] = ${perHead}`;
  if (!(value instanceof Float32Array) && !(value instanceof Uint8Array)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.attnMask',
      expected: `a Float32Array (added to the scores) or a Uint8Array (1 = not allowed), ${shapes}`,
      given: describe(value),
    });
  }
  if (value.length !== shared && value.length !== perHead) {
    throw new ShapeMismatchError({ where, argument: 'options.attnMask', expected: `of length ${shapes}`, given: `length ${value.length}` });
  }
  const mask = value instanceof Float32Array ? value : Float32Array.from(value, (v) => (v ? -Infinity : 0));
  return { mask, perHead: value.length === perHead && perHead !== shared };
}

export function resolveHeadMask(where: string, value: unknown, B: number, H: number): Float32Array {
  const shapes = `[H] = ${H} or [B, H] = [${B}, ${H}] = ${B * H}`;
  if (!(value instanceof Float32Array)) {
    throw new InvalidArgumentError({ where, argument: 'options.headMask', expected: `a Float32Array ${shapes}`, given: describe(value) });
  }
  if (value.length !== H && value.length !== B * H) {
    throw new ShapeMismatchError({ where, argument: 'options.headMask', expected: `of length ${shapes}`, given: `length ${value.length}` });
  }
  if (value.length === B * H) return value;
  const expanded = new Float32Array(B * H);
  for (let b = 0; b < B; b++) expanded.set(value, b * H);
  return expanded;
}

export function resolveMasks(where: string, o: Record<string, unknown>, B: number, H: number, Sq: number, Skv: number, window: number): MaskPlan {
  const keyPaddingMask =
    o.keyPaddingMask === undefined ? null : requireUint8Array(where, 'options.keyPaddingMask', o.keyPaddingMask, B * Skv, `[B, Skv] = [${B}, ${Skv}] = ${B * Skv}`);
  const attn = o.attnMask === undefined ? null : resolveAttnMask(where, o.attnMask, B, H, Sq, Skv);
  const headMask = o.headMask === undefined ? null : resolveHeadMask(where, o.headMask, B, H);
  return { attnMask: attn?.mask ?? null, attnMaskPerHead: attn?.perHead ?? false, keyPaddingMask, window, headMask };
}

export function resolveWindow(where: string, value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new InvalidArgumentError({ where, argument: 'options.window', expected: 'a positive integer (keys i − window < j ≤ i are seen)', given: describe(value) });
  }
  return value;
}

/** A window wider than every row's reach (Sq + Skv) sees what the causal band sees: keep it in 32-bit range. */
export function clampWindow(window: number, Sq: number, Skv: number): number {
  return window === 0 ? 0 : Math.min(window, Sq + Skv);
}

/** The score options: scale, softcap, sinks and alibiSlopes (types.ts ScoreOptions), checked for H heads of size Dh. */
export function resolveScore(where: string, o: Record<string, unknown>, H: number, Dh: number): ScorePlan {
  const positive = (name: string, meaning: string): number | undefined => {
    const value = o[name];
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
      throw new InvalidArgumentError({
        where,
        argument: `options.${name}`,
        expected: `a finite number > 0 (${meaning})`,
        given: describe(value),
        fix: `Leave ${name} out for the default.`,
      });
    }
    return value;
  };
  const perHead = (name: string, meaning: string): Float32Array | null => {
    const value = o[name];
    if (value === undefined) return null;
    if (!(value instanceof Float32Array)) {
      throw new InvalidArgumentError({ where, argument: `options.${name}`, expected: `a Float32Array [H] = ${H} (${meaning})`, given: describe(value) });
    }
    if (value.length !== H)
      throw new ShapeMismatchError({ where, argument: `options.${name}`, expected: `of length H = ${H} (one per query head)`, given: `length ${value.length}` });
    const bad = value.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) throw new InvalidArgumentError({ where, argument: `options.${name}[${bad}]`, expected: 'a finite number', given: String(value[bad]) });
    return value;
  };
  const plain = plainScore(Dh);
  return {
    ...plain,
    scale: positive('scale', 'multiplies q·k in place of 1/√headDim') ?? plain.scale,
    softcap: positive('softcap', 'scores become softcap·tanh(score / softcap)') ?? plain.softcap,
    sinks: perHead('sinks', "each head's sink logit"),
    alibiSlopes: perHead('alibiSlopes', "each head's ALiBi slope"),
  };
}

/** A custom score modification: { wgsl, reference } (types.ts ScoreMod). Its WGSL is compiled on the GPU before its first use. */
export function resolveScoreMod(where: string, argument: string, value: unknown): ScoreMod | null {
  if (value === undefined) return null;
  if (typeof value !== 'object' || value === null) {
    throw new InvalidArgumentError({ where, argument, expected: '{ wgsl, reference }', given: describe(value) });
  }
  const { wgsl, reference, ...rest } = value as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length) throw new InvalidArgumentError({ where, argument: `${argument}.${unknown[0]}`, expected: 'one of wgsl, reference', given: 'an unknown key' });
  if (typeof wgsl !== 'string' || !/\bfn\s+scoreMod\s*\(/.test(wgsl)) {
    throw new InvalidArgumentError({
      where,
      argument: `${argument}.wgsl`,
      expected: 'WGSL source defining fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32',
      given: typeof wgsl === 'string' ? 'source without fn scoreMod' : describe(wgsl),
    });
  }
  if (typeof reference !== 'function') {
    throw new InvalidArgumentError({
      where,
      argument: `${argument}.reference`,
      expected: 'a function (score, b, h, i, j) => number: what the CPU backend runs',
      given: describe(reference),
    });
  }
  return { wgsl, reference: reference as ScoreMod['reference'] };
}

/** Two arguments that come together (key and value, cos and sin): both given or neither, else the missing one is named. */
export function requireBothOrNeither(where: string, prefix: string, o: Record<string, unknown>, first: string, second: string, fix?: string): void {
  if ((o[first] === undefined) === (o[second] === undefined)) return;
  const [missing, given] = o[first] === undefined ? [first, second] : [second, first];
  throw new InvalidArgumentError({ where, argument: `${prefix}.${missing}`, expected: `given with ${prefix}.${given}`, given: 'nothing', ...(fix ? { fix } : {}) });
}

/** The sizes of projected Q [B, H, Sq, Dh] and K, V [B, G, Skv, Dh] (scaledDotProductAttention's and linearAttention's options). */
export function resolveHeadShape(where: string, o: Record<string, unknown>): { B: number; H: number; G: number; Sq: number; Skv: number; Dh: number } {
  const B = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const H = requirePositiveInteger(where, 'options.numHeads', o.numHeads);
  const G = o.numKvHeads === undefined ? H : requirePositiveInteger(where, 'options.numKvHeads', o.numKvHeads);
  if (H % G !== 0) {
    throw new InvalidArgumentError({ where, argument: 'options.numKvHeads', expected: `a divisor of numHeads (${H})`, given: String(G) });
  }
  const Sq = requirePositiveInteger(where, 'options.seqLen', o.seqLen);
  const Skv = o.kvSeqLen === undefined ? Sq : requirePositiveInteger(where, 'options.kvSeqLen', o.kvSeqLen);
  const Dh = requirePositiveInteger(where, 'options.headDim', o.headDim);
  return { B, H, G, Sq, Skv, Dh };
}
