// The benchmark's nouns, shared by the demo page, the headless `npm run bench`, and every system
// under test (this engine, the naive per-head loop, TensorFlow.js, ONNX Runtime Web, the CPU reference).

import type { StateDict } from '../../src/index.ts';

/** One layer shape to benchmark. Self-attention: query [B, S, E]. */
export interface BenchShape {
  batchSize: number; // B
  seqLen: number;    // S
  embedDim: number;  // E
  numHeads: number;  // H
  isCausal: boolean;
}

export interface BenchPreset extends BenchShape {
  id: string;
  label: string;
}

/** What a system gets to build its runnable layer: the shape and PyTorch-layout weights. */
export interface BenchLayer {
  shape: BenchShape;
  /** in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E] */
  stateDict: StateDict;
}

/** A system ready to run one shape: build once, run many times, dispose. */
export interface PreparedSystem {
  /** Runs the whole layer on a Float32Array query [B, S, E] and resolves to the output [B, S, E] read back to the CPU. */
  run(query: Float32Array): Promise<Float32Array>;
  /** GPU milliseconds per kernel of one run, from timestamp queries, where the system can tell. */
  kernelTimings?(query: Float32Array): Promise<Record<string, number> | null>;
  dispose(): Promise<void> | void;
}

export interface BenchSystem {
  /** Stable id used in JSON: 'engine' | 'naive' | 'tfjs' | 'ort' | 'cpu'. */
  id: string;
  /** Human label, e.g. "TensorFlow.js 4.22 (WebGPU backend)". */
  label: string;
  /** Loads the library and builds the layer. Throws (with a clear message) if the system cannot run here. */
  prepare(layer: BenchLayer): Promise<PreparedSystem>;
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
}

export interface BenchResult {
  shape: BenchShape;
  flops: number;
  warmup: number;
  runs: number;
  systems: SystemResult[];
}

export interface BenchProgress {
  system: string;
  phase: 'load' | 'warmup' | 'run' | 'done';
  /** 0…1 over the whole benchmark. */
  fraction: number;
  message: string;
}
