// The page `npm run bench` drives in headless Chromium: the same runner and systems as the demo's
// benchmark panel, with progress reported to the terminal through window.__benchProgress.

import { sharedEngine } from './systems/engine.ts';
import { benchSystems } from './registry.ts';
import { type RunResult, runBenchmark } from './runner.ts';
import type { BenchProgress, BenchShape } from './types.ts';

export interface HeadlessRequest {
  shape: BenchShape;
  warmup: number;
  runs: number;
  seed: number;
  systemIds: string[];
}

export interface HeadlessReport {
  result: RunResult;
  adapter: { vendor: string; architecture: string; device: string; description: string } | null;
  backend: string;
  fallbackReason: string | null;
  features: string[];
  userAgent: string;
}

declare global {
  interface Window {
    runBench(request: HeadlessRequest): Promise<HeadlessReport>;
    __benchProgress?: (p: BenchProgress) => void;
  }
}

window.runBench = async (request) => {
  // Which adapter this page gets: the same one every WebGPU system here requests.
  const probe = await sharedEngine();
  const adapter = probe.adapterInfo;
  const backend = probe.backend;
  const fallbackReason = probe.fallbackReason;
  const gpuAdapter = await navigator.gpu?.requestAdapter();
  const features = gpuAdapter ? [...gpuAdapter.features].sort() : [];

  const systems = await benchSystems();
  const result = await runBenchmark(request.shape, systems, {
    warmup: request.warmup,
    runs: request.runs,
    seed: request.seed,
    systemIds: request.systemIds,
    onProgress: (p) => window.__benchProgress?.(p),
  });
  return { result, adapter, backend, fallbackReason, features, userAgent: navigator.userAgent };
};
