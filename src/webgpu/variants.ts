// The kernel variants the engine chooses between, per kernel, and the built-in choice for an adapter
// the tuner has not measured (tuning/tuner.ts sweeps them and remembers the fastest).
//
//   projection (qkv_projection, output_projection): which GEMM core is appended to the problem file
//     register-4x4   shaders/gemm_register_4x4.wgsl, 4 rows × 4 columns per invocation
//     register-8x8   shaders/gemm_register_8x8.wgsl, 8 rows × 8 columns per invocation (fewer loads per FMA)
//     workgroup-64   shaders/gemm_workgroup.wgsl, 64 × 64 tiles staged through workgroup memory
//   attention (flash_attention): query rows per workgroup × keys per K/V tile (× rows per invocation)
//     rows32-keys32, rows64-keys32: one row per invocation (keys per tile drop to what workgroup memory holds)
//     rows32-keys32-r2, rows32-keys32-r4, rows64-keys32-r4: 2 or 4 rows per invocation, so each K/V
//       element read serves several rows (fewer loads per multiply-add; more registers)

import gemmRegister4x4 from '../../shaders/gemm_register_4x4.wgsl?raw';
import gemmRegister8x8 from '../../shaders/gemm_register_8x8.wgsl?raw';
import gemmWorkgroup from '../../shaders/gemm_workgroup.wgsl?raw';

import type { AttentionVariant, ProjectionVariant } from '../types.ts';

export type { AttentionVariant, ProjectionVariant };
export const PROJECTION_VARIANTS: readonly ProjectionVariant[] = ['register-4x4', 'register-8x8', 'workgroup-64'];
export const ATTENTION_VARIANTS: readonly AttentionVariant[] = ['rows32-keys32', 'rows64-keys32', 'rows32-keys32-r2', 'rows32-keys32-r4', 'rows64-keys32-r4'];

/** One variant per kernel: what a forward runs. */
export interface KernelChoice {
  qkv_projection: ProjectionVariant;
  flash_attention: AttentionVariant;
  output_projection: ProjectionVariant;
}
export type KernelName = keyof KernelChoice;
export const KERNEL_NAMES: readonly KernelName[] = ['qkv_projection', 'flash_attention', 'output_projection'];

/** The variants of each kernel. */
export const VARIANTS: { readonly [K in KernelName]: readonly KernelChoice[K][] } = {
  qkv_projection: PROJECTION_VARIANTS,
  flash_attention: ATTENTION_VARIANTS,
  output_projection: PROJECTION_VARIANTS,
};

/** Adapters that are a CPU running the shaders (lavapipe, SwiftShader, WARP): barriers cost, loads are gathers. */
export function isCpuAdapter(info: { vendor: string; architecture: string; device: string; description: string }): boolean {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.toLowerCase();
  return /llvmpipe|lavapipe|swiftshader|microsoft basic render|warp|\bcpu\b/.test(text);
}

/** What runs before (or without) a sweep: register tiles on CPU adapters, workgroup tiles on GPUs. */
export function defaultChoice(cpu: boolean): KernelChoice {
  return cpu
    ? { qkv_projection: 'register-8x8', flash_attention: 'rows64-keys32-r4', output_projection: 'register-8x8' }
    : { qkv_projection: 'workgroup-64', flash_attention: 'rows64-keys32', output_projection: 'workgroup-64' };
}

/** How a projection variant is built and dispatched. */
export interface GemmShape {
  /** The core appended to the problem file. */
  core: string;
  /** `override` values. */
  constants: Record<string, number>;
  /** Rows (M) and columns (N) of Y one workgroup covers. */
  tileRows: number;
  tileCols: number;
}

export function gemmShape(variant: ProjectionVariant): GemmShape {
  switch (variant) {
    case 'register-4x4':
      return { core: gemmRegister4x4, constants: { WG_X: 8, WG_Y: 8 }, tileRows: 32, tileCols: 32 };
    case 'register-8x8':
      return { core: gemmRegister8x8, constants: { WG_X: 8, WG_Y: 8 }, tileRows: 64, tileCols: 64 };
    case 'workgroup-64':
      return { core: gemmWorkgroup, constants: {}, tileRows: 64, tileCols: 64 };
  }
}

/**
 * Query rows per workgroup, keys per tile and rows per invocation asked for, of an attention variant
 * ("rows64-keys32-r4": 64 rows, 32 keys, 4 rows per invocation; no "-r": 1).
 */
export function attentionShape(variant: AttentionVariant): { rows: number; keys: number; rowsPerInvocation: number } {
  const [, rows, keys, rpi] = /^rows(\d+)-keys(\d+)(?:-r(\d+))?$/.exec(variant) as RegExpExecArray;
  return { rows: Number(rows), keys: Number(keys), rowsPerInvocation: Number(rpi ?? 1) };
}
