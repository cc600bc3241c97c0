// A custom score modification's WGSL (ScoreMod.wgsl) is the caller's code: it is compiled once per
// device on its own before any kernel that includes it, and a compile error becomes an
// InvalidArgumentError that quotes the compiler's message with the line in the caller's source.

import { InvalidArgumentError } from '../errors.ts';
import type { ScoreMod } from '../types.ts';
import type { Precision } from './buffers.ts';
import { scoreModParts, shaderCode } from './shader.ts';

const checked = new WeakMap<GPUDevice, Map<string, Promise<void>>>();

/** Resolves when `scoreMod.wgsl` compiles on this device with the signature the kernels call; else rejects, naming `argument`. */
export function checkScoreMod(device: GPUDevice, precision: Precision, scoreMod: ScoreMod | null, where: string, argument: string): Promise<void> {
  if (!scoreMod) return Promise.resolve();
  let cache = checked.get(device);
  if (!cache) {
    cache = new Map();
    checked.set(device, cache);
  }
  const key = `${precision}|${scoreMod.wgsl}`;
  let verdict = cache.get(key);
  if (!verdict) {
    verdict = compile(device, precision, scoreMod.wgsl, where, argument);
    cache.set(key, verdict);
  }
  return verdict;
}

async function compile(device: GPUDevice, precision: Precision, wgsl: string, where: string, argument: string): Promise<void> {
  const probe = '@compute @workgroup_size(1)\nfn main() {\n  let s: f32 = scoreMod(0.0, 0u, 0u, 0u, 0u);\n  _ = s;\n}';
  const code = shaderCode({ precision, sources: [scoreModParts(wgsl).source, probe] });
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ label: 'scoreMod.check', code });
  const info = await module.getCompilationInfo();
  await device.popErrorScope(); // the messages are in `info`; the scope keeps them from reaching the device's error handler
  const error = info.messages.find((m) => m.type === 'error');
  if (!error) return;
  const before = code.slice(0, code.indexOf(wgsl)).split('\n').length - 1; // lines ahead of the caller's source
  const line = error.lineNum - before;
  throw new InvalidArgumentError({
    where,
    argument: `${argument}.wgsl`,
    expected: 'WGSL that compiles, defining fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32',
    given: `a compile error${line >= 1 && line <= wgsl.split('\n').length ? ` at line ${line}` : ''}: ${error.message}`,
    fix: 'Fix the WGSL (constants NO_SCORE, LOG2E and the other shared ones are in scope); the reference function runs on the CPU backend.',
  });
}
