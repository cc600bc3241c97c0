// Rotary position embeddings on the 'wasm' backend, in the kernels (wasm/rotary.ts) where the layer has
// rotary and no QK-norm (most of today's models: Llama, Qwen2, Mistral, SmolLM, Phi-3): each token's
// (cos, sin) pairs computed once in JavaScript (rotaryAngles) into the arena, then every query and key
// head of the rows turned by the kernel, with cpu/head-transform.ts's transformHead's float64 arithmetic:
// the same bits. A 512-token prefill layer of E 2048 H 16 G 4 (q4_0, 'q8', one thread) spent 9.2–9.8 ms
// in JavaScript outside the kernels with the heads turned there, 7.8–8.1 ms with them turned here.
// A layer with QK-norm keeps the JavaScript (the norm comes first, per head or across heads).

import { type LayerSpec, rotaryAngles } from '../plan/index.ts';
import type { WasmKernels } from './kernels.ts';

/**
 * Turns the rows' heads (each [ptr, heads]: token-major [rows, heads·Dh] at byte address ptr) by the
 * rotary of `spec`, row m at positions[m]. Returns false, doing nothing, where the kernels do not apply
 * (no rotary, or QK-norm): the caller transforms the heads itself.
 */
export function rotateInKernels(kernels: WasmKernels, spec: LayerSpec, positions: ArrayLike<number>, targets: [ptr: number, heads: number][]): boolean {
  const { rotary, qkNorm, headDim: Dh } = spec;
  if (!rotary || qkNorm) return false;
  const rows = positions.length;
  if (rows === 0) return true;
  const angles = kernels.alloc(2 * rows * rotary.dim); // f64 [rows, dim]: two floats' bytes each
  const view = new Float64Array(kernels.memory.buffer, angles, rows * rotary.dim);
  const one = new Float64Array(rotary.dim);
  for (let m = 0; m < rows; m++) view.set(rotaryAngles(rotary, positions[m], one), m * rotary.dim);
  for (const [ptr, heads] of targets) kernels.k.rotary(ptr, heads * Dh, rows, heads, Dh, angles, rotary.dim, rotary.interleaved ? 1 : 0);
  return true;
}
