// The WebGPU kernels (the built-in choice of this adapter kind) and the 'wasm' backend's (its tiles: 4×8
// GEMM blocks, 32 query rows × 64 keys) against the float64 CPU reference: the grid of
// test/helpers/gpu-vs-cpu-grid.ts (S = 1, odd, past every tile; head sizes 4…256; grouped-query and
// multi-query; bias or none; causal or not).

import { describe } from 'vitest';
import { useEngines } from './helpers/engines.ts';
import { describeGpuVsCpuGrid } from './helpers/gpu-vs-cpu-grid.ts';

const engines = useEngines('webgpu', 'wasm');

describe.each(['webgpu', 'wasm'] as const)('%s vs CPU reference', (backend) => {
  describeGpuVsCpuGrid(() => engines.of(backend));
});
