// System under test "cpu": this library's CPU backend, the float64 JavaScript reference (the same
// passes as the kernels, rounded to float32 at the end). The floor every other system should beat.

import { type AttentionEngine, createAttentionEngine } from 'webgpu-attention';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { layerRun } from './layer-run.ts';

let cpuEngine: Promise<AttentionEngine> | null = null;

export const cpuSystem: BenchSystem = {
  id: 'cpu',
  label: 'webgpu-attention CPU backend (float64 JS)',
  kvCache: true,
  async prepare({ shape, stateDict, past }: BenchLayer): Promise<PreparedSystem> {
    cpuEngine ??= createAttentionEngine({ backend: 'cpu' });
    const engine = await cpuEngine;
    const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
    const run = layerRun(layer, { shape, past });
    return {
      run: run.run,
      dispose: () => {
        run.dispose();
        layer.dispose();
      },
    };
  },
};
