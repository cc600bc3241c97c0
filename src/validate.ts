// Small argument checks shared by every entry point. Each throws a typed error whose message names
// the argument, what was expected, what was given and, where it helps, the fix.

import { InvalidArgumentError, ShapeMismatchError } from './errors.ts';

/** A short, printable description of any value, for "got …" in messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (ArrayBuffer.isView(value)) {
    const length = 'length' in value ? (value as unknown as { length: number }).length : value.byteLength;
    return `${value.constructor.name} of length ${length}`;
  }
  if (Array.isArray(value)) return `an Array of length ${value.length}`;
  if (typeof value === 'function') return 'a function';
  return `an object (${Object.prototype.toString.call(value).slice(8, -1)})`;
}

export function requirePositiveInteger(where: string, argument: string, value: unknown, fix?: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new InvalidArgumentError({ where, argument, expected: 'a positive integer', given: describe(value), fix });
  }
  return value;
}

export function requireBoolean(where: string, argument: string, value: unknown): boolean {
  if (typeof value !== 'boolean') {
    throw new InvalidArgumentError({ where, argument, expected: 'true or false', given: describe(value) });
  }
  return value;
}

export function requireObject(where: string, argument: string, value: unknown, fix?: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || ArrayBuffer.isView(value)) {
    throw new InvalidArgumentError({ where, argument, expected: 'an object', given: describe(value), fix });
  }
  return value as Record<string, unknown>;
}

/** Every key of T; of every member where T is a union (ForwardOptions: the batched form's and the packed form's). */
export type KeysOf<T> = T extends unknown ? keyof T : never;

/**
 * The option names of the options type T, from a table that names each once, for rejectUnknownKeys:
 * `knownKeys<KvCacheOptions>({ batchSize: true, maxSeqLen: true, key: true, value: true, length: true })`.
 * A table that leaves out a key of T, or names one T lacks, does not compile. Its order is the order
 * an unknown option's message lists them in.
 */
export function knownKeys<T>(table: { readonly [K in KeysOf<T>]: true }): readonly (KeysOf<T> & string)[] {
  return Object.keys(table) as (KeysOf<T> & string)[];
}

/** Refuses option names this entry point does not know (a misspelt option must not be ignored silently). */
export function rejectUnknownKeys(where: string, argument: string, value: Record<string, unknown>, known: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      const close = known.find((k) => k.toLowerCase() === key.toLowerCase().replace(/_/g, ''));
      throw new InvalidArgumentError({
        where,
        argument: `${argument}.${key}`,
        expected: `one of the known options (${known.join(', ')})`,
        given: `an unknown option "${key}"`,
        fix: close ? `Did you mean "${close}"?` : 'Remove it or check its spelling.',
      });
    }
  }
}

/** A Float32Array of exactly `length` elements; `shape` says how that length is made, e.g. "[B, S, E] = [2, 3, 8] = 48". */
export function requireFloat32Array(where: string, argument: string, value: unknown, length: number, shape: string): Float32Array {
  if (!(value instanceof Float32Array)) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: `a Float32Array ${shape}`,
      given: describe(value),
      fix: 'Convert it with Float32Array.from(...).',
    });
  }
  if (value.length !== length) {
    throw new ShapeMismatchError({ where, argument, expected: `of length ${shape}`, given: `length ${value.length}` });
  }
  return value;
}
