// createAttentionEngine's `tuning` option, its 'wasm' backend's options (threads, wasmSimd), and
// warmup/tune's options: checked, defaults filled in.

import { InvalidArgumentError, UnsupportedError } from './errors.ts';
import { TUNING_KEYS, WARMUP_OPTION_KEYS } from './option-keys.ts';
import type { EngineOptions, TuningStore, WarmupOptions } from './types.ts';
import { describe, rejectUnknownKeys, requireObject, requirePositiveInteger } from './validate.ts';
import { resolveWasmSimd } from './wasm/kernels.ts';
import { defaultTuningStore } from './webgpu/tuning/store.ts';
import type { ResolvedTuning } from './webgpu/tuning/tuner.ts';
import { KERNEL_NAMES, type KernelChoice, type KernelName, VARIANTS } from './webgpu/variants.ts';

/** warmup's and tune's options: { onProgress? }. */
export function progressOption(where: string, options: unknown): WarmupOptions['onProgress'] {
  const o = requireObject(where, 'options', options, 'Pass { onProgress } or leave it out.');
  rejectUnknownKeys(where, 'options', o, WARMUP_OPTION_KEYS);
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') {
    throw new InvalidArgumentError({
      where,
      argument: 'options.onProgress',
      expected: 'a function ({ done, total, kernel, variant }) => void',
      given: describe(o.onProgress),
    });
  }
  return o.onProgress as WarmupOptions['onProgress'];
}

/** Checks createAttentionEngine's `tuning` option and fills in its defaults. */
export function resolveTuning(where: string, given: unknown): ResolvedTuning {
  if (given === undefined) return { mode: 'auto', forced: {}, store: defaultTuningStore(), background: null };
  const o = requireObject(where, 'options.tuning', given);
  rejectUnknownKeys(where, 'options.tuning', o, TUNING_KEYS);
  const mode = o.mode ?? 'auto';
  if (mode !== 'auto' && mode !== 'off') {
    throw new InvalidArgumentError({ where, argument: 'options.tuning.mode', expected: '"auto", "off" or left out', given: describe(mode) });
  }
  if (o.background !== undefined && typeof o.background !== 'boolean') {
    throw new InvalidArgumentError({
      where,
      argument: 'options.tuning.background',
      expected: 'true, false or left out',
      given: describe(o.background),
      fix: 'Left out, compiles and sweeps run in the background except on wgpu (Firefox, Deno).',
    });
  }
  const forced: Partial<KernelChoice> = {};
  if (o.kernels !== undefined) {
    const kernels = requireObject(where, 'options.tuning.kernels', o.kernels);
    rejectUnknownKeys(where, 'options.tuning.kernels', kernels, KERNEL_NAMES);
    for (const [kernel, variant] of Object.entries(kernels) as [KernelName, unknown][]) {
      if (variant === undefined) continue;
      const known = VARIANTS[kernel] as readonly string[];
      if (typeof variant !== 'string' || !known.includes(variant)) {
        throw new InvalidArgumentError({
          where,
          argument: `options.tuning.kernels.${kernel}`,
          expected: `one of ${known.map((v) => `"${v}"`).join(', ')}`,
          given: describe(variant),
        });
      }
      (forced as Record<string, string>)[kernel] = variant;
    }
  }
  let store: TuningStore | null;
  if (o.store === undefined) store = defaultTuningStore();
  else if (o.store === null) store = null;
  else {
    const s = o.store as Partial<TuningStore>;
    if (typeof s !== 'object' || typeof s.load !== 'function' || typeof s.save !== 'function') {
      throw new InvalidArgumentError({
        where,
        argument: 'options.tuning.store',
        expected: 'null, left out, or an object with load() and save() (a TuningStore)',
        given: describe(o.store),
        fix: 'Use fileTuningStore(path) or localStorageTuningStore(localStorage), or null to remember nothing.',
      });
    }
    store = { where: typeof s.where === 'string' ? s.where : 'a custom store', load: s.load.bind(s), save: s.save.bind(s) };
  }
  return { mode, forced, store, background: (o.background as boolean | undefined) ?? null };
}

/** Why each 'wasm'-only option is the 'wasm' backend's (the fix of its refusal elsewhere). */
const WASM_ONLY = {
  threads: "Threads are the 'wasm' backend's: pass backend: 'wasm' with them.",
  wasmSimd: "The build of the kernels is the 'wasm' backend's: pass backend: 'wasm' with it.",
} as const;

/**
 * options.threads and options.wasmSimd checked: each only with backend 'wasm', threads a positive
 * integer, wasmSimd one of its values and 'relaxed' only where the platform runs it (kernels.ts's
 * probe). Returns wasmSimd (undefined: 'auto').
 */
export function resolveWasmOptions(where: string, options: EngineOptions, backend: unknown): EngineOptions['wasmSimd'] {
  const { threads, wasmSimd } = options;
  if (threads !== undefined) requirePositiveInteger(where, 'options.threads', threads);
  if (wasmSimd !== undefined && wasmSimd !== 'auto' && wasmSimd !== 'relaxed' && wasmSimd !== 'simd128') {
    throw new InvalidArgumentError({ where, argument: 'options.wasmSimd', expected: '"auto", "relaxed", "simd128" or left out', given: describe(wasmSimd) });
  }
  for (const name of ['threads', 'wasmSimd'] as const) {
    if (options[name] !== undefined && backend !== 'wasm') {
      throw new InvalidArgumentError({
        where,
        argument: `options.${name}`,
        expected: "left out unless backend: 'wasm'",
        given: describe(options[name]),
        fix: WASM_ONLY[name],
      });
    }
  }
  if (wasmSimd !== undefined && resolveWasmSimd(wasmSimd) === null) {
    throw new UnsupportedError({
      where,
      argument: 'options.wasmSimd',
      expected: "'relaxed' only where the platform runs WebAssembly relaxed SIMD right",
      given: "'relaxed' on a platform without it",
      fix: "Pass 'auto' (or leave it out) to take relaxed SIMD where it is (Chromium ≥ 114, Node ≥ 22; Node 20 with node --experimental-wasm-relaxed-simd).",
    });
  }
  return wasmSimd;
}
