// Types of case.mjs, for the consumers' type checks (and the repo's `tsc --noEmit -p .`). It does not
// import the package: in the temp copy it sits outside the consumers' node_modules.

export interface PackCase {
  name: string;
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  batchSize: number;
  seqLen: number;
  isCausal: boolean;
  seed: number;
}

export interface PackCaseResult {
  ok: boolean;
  backend: 'webgpu' | 'cpu' | null;
  adapterInfo: { vendor: string; architecture: string; device: string; description: string } | null;
  fallbackReason: string | null;
  cases: Array<{
    name: string;
    elements: number;
    gpuMs: number;
    sample: number[];
    ok: boolean;
    tol: number;
    maxAbs: number;
    bad: number;
    firstBad: string[];
  }>;
  gpuBuffersAfterDispose?: number;
  problems: string[];
}

export declare const CASES: PackCase[];
/** `lib`: the package's module namespace (`import * as lib from 'webgpu-attention'`). */
export declare function runPackCase(lib: object): Promise<PackCaseResult>;
