// The benchmark's nouns, shared by the demo page, the headless `npm run bench`, and every system
// under test (this engine, the naive per-head loop, TensorFlow.js, ONNX Runtime Web, their WASM
// backends, this engine's 'wasm' backend, the CPU reference).

import type { StateDict } from '../../src/index.ts';

/** One layer shape to benchmark. Self-attention: query [B, S, E]. */
export interface BenchShape {
  batchSize: number; // B
  seqLen: number; // S
  embedDim: number; // E
  numHeads: number; // H
  isCausal: boolean;
  /**
   * A decode step: positions already in a KV cache, which the seqLen new tokens attend over (queries
   * aligned with the last keys). Only this engine's backends take a KV cache (BenchSystem.kvCache);
   * the peers compose a layer over whole sequences and are not run. Default 0: no cache.
   */
  cacheLen?: number;
}

export interface BenchPreset extends BenchShape {
  id: string;
  label: string;
  /**
   * false: not run by `npm run bench -- --preset all` (only when named). For shapes where the peers
   * and the float64 reference take many minutes or run out of memory (S=8192: TensorFlow.js alone
   * would hold [H, S, S] scores, 2 GiB). Default true.
   */
  inAll?: boolean;
}

/** What a system gets to build its runnable layer: the shape and PyTorch-layout weights. */
export interface BenchLayer {
  shape: BenchShape;
  /** in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E] */
  stateDict: StateDict;
  /** With BenchShape.cacheLen: the cache's past keys and values, [B, H, cacheLen, Dh] each (the layer's head layout). */
  past?: { key: Float32Array; value: Float32Array };
}

/** A system ready to run one shape: build once, run many times, dispose. */
export interface PreparedSystem {
  /** Runs the whole layer on a Float32Array query [B, S, E] and resolves to the output [B, S, E] read back to the CPU. */
  run(query: Float32Array): Promise<Float32Array>;
  /**
   * Resolves when the work the first run started in the background is done (this engine: its final
   * kernels compiled, its tuner's sweeps), so that the timed runs measure the steady state.
   */
  settled?(): Promise<void>;
  /** GPU milliseconds per kernel of one run, from timestamp queries, where the system can tell. */
  kernelTimings?(query: Float32Array): Promise<Record<string, number> | null>;
  /** The GPU memory the system held for this layer over all its runs so far, where it can tell. */
  gpuMemory?(): GpuMemory | null;
  /** Which kernel variants ran, and how they were chosen (this engine's tuner), where the system has such a choice. */
  kernelVariants?(): KernelVariant[] | null;
  /** The CPU threads a forward runs on, for the systems on the CPU (the WASM ones) that can tell. */
  threads?: number;
  dispose(): Promise<void> | void;
}

export interface BenchSystem {
  /** Stable id used in JSON: 'engine' | 'naive' | 'tfjs' | 'ort' | 'wasm' | 'wasm-threads' | 'ort-wasm' | 'tfjs-wasm' | 'cpu'. */
  id: string;
  /** Human label, e.g. "TensorFlow.js 4.22 (WebGPU backend)". */
  label: string;
  /** Loads the library and builds the layer. Throws (with a clear message) if the system cannot run here. */
  prepare(layer: BenchLayer): Promise<PreparedSystem>;
  /** It runs shapes with a KV cache (BenchShape.cacheLen): a decode step on a cache holding BenchLayer.past. */
  kvCache?: boolean;
}

export interface SystemResult {
  id: string;
  label: string;
  status: 'ok' | 'failed';
  /** Why it failed (load error, unsupported shape, wrong output). */
  error?: string;
  /** Median wall time of one forward, ms (upload and readback included). */
  medianMs?: number;
  /** Every timed run, ms. */
  runsMs?: number[];
  gflops?: number;
  /** medianMs of this system / medianMs of this engine (>1: slower than this engine). */
  ratioToEngine?: number;
  /** Max |output − CPU reference| of the first run: the correctness gate before timing. */
  maxAbsError?: number;
  /** GPU milliseconds per kernel (timestamp queries) of one extra run after the timed ones; where known. */
  kernelMs?: Record<string, number>;
  /** The system's GPU memory for this shape over the gate, warm-up and timed runs; where known (this engine: engine.stats().peakBytes). */
  gpuMemory?: GpuMemory;
  /** The kernel variants that ran (this engine: its tuner's choices for this shape, with each variant's sweep time). */
  kernelVariants?: KernelVariant[];
  /** PreparedSystem.threads, where the system said. */
  threads?: number;
}

/** One kernel's variant for this shape: engine.tuning's TuningChoice. */
export interface KernelVariant {
  kernel: string;
  variant: string;
  source: string;
  timesMs?: Record<string, number>;
  refused?: Record<string, string>;
}

/** GPU memory of one system for one shape, in bytes. */
export interface GpuMemory {
  /** The most bytes of GPU buffers held at once: weights plus the scratch of a call (inputs, intermediates, readback staging). */
  peakBytes: number;
  /** Of which the layer's weights (held for the layer's whole life). */
  weightBytes: number;
  /** peakBytes − weightBytes: the scratch one call needs at its peak. */
  scratchPeakBytes: number;
}

export interface BenchResult {
  shape: BenchShape;
  flops: number;
  warmup: number;
  runs: number;
  systems: SystemResult[];
  /** Systems asked for but not run at this shape, and why (a decode step: the peers take no KV cache). */
  notRun?: { id: string; label: string; reason: string }[];
}

export interface BenchProgress {
  system: string;
  phase: 'load' | 'warmup' | 'run' | 'done';
  /** 0…1 over the whole benchmark. */
  fraction: number;
  message: string;
}
