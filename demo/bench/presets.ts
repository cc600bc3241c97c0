// The benchmark's preset shapes, smallest first. Self-attention, batch first, biases on.
// `long` and `long-causal` are twins (same shape, causal or not): the performance issue's causal
// targets are ratios between them, so measure both in one run. `s8192-e512` is the memory
// target (the engine's peak GPU memory at S=8192); it is left out of `--preset all` (see `inAll`).
// `decode-1024` and `decode-4096` are one decoder step: a new token over a KV cache of that many
// positions, run by this engine's backends only (the peers take no KV cache).

import type { BenchPreset } from './types.ts';

export const PRESETS: BenchPreset[] = [
  { id: 'tiny', label: 'tiny — B=1 S=16 E=32 H=2', batchSize: 1, seqLen: 16, embedDim: 32, numHeads: 2, isCausal: false },
  { id: 's128-e256', label: 'small — B=1 S=128 E=256 H=4', batchSize: 1, seqLen: 128, embedDim: 256, numHeads: 4, isCausal: false },
  { id: 's512-e512', label: 'medium — B=1 S=512 E=512 H=8', batchSize: 1, seqLen: 512, embedDim: 512, numHeads: 8, isCausal: false },
  { id: 'bert-base', label: 'BERT-base — B=1 S=512 E=768 H=12', batchSize: 1, seqLen: 512, embedDim: 768, numHeads: 12, isCausal: false },
  { id: 'long', label: 'long — B=1 S=2048 E=512 H=8', batchSize: 1, seqLen: 2048, embedDim: 512, numHeads: 8, isCausal: false },
  { id: 'long-causal', label: 'long causal — B=1 S=2048 E=512 H=8, causal', batchSize: 1, seqLen: 2048, embedDim: 512, numHeads: 8, isCausal: true },
  {
    id: 'decode-1024',
    label: 'decode step — B=1, 1 token over a KV cache of 1024, E=512 H=8 (this engine only)',
    batchSize: 1,
    seqLen: 1,
    embedDim: 512,
    numHeads: 8,
    isCausal: true,
    cacheLen: 1024,
  },
  {
    id: 'decode-4096',
    label: 'decode step — B=1, 1 token over a KV cache of 4096, E=512 H=8 (this engine only)',
    batchSize: 1,
    seqLen: 1,
    embedDim: 512,
    numHeads: 8,
    isCausal: true,
    cacheLen: 4096,
  },
  {
    id: 's8192-e512',
    label: 'very long — B=1 S=8192 E=512 H=8 (engine only; minutes on a software adapter)',
    batchSize: 1,
    seqLen: 8192,
    embedDim: 512,
    numHeads: 8,
    isCausal: false,
    inAll: false,
  },
];

export function presetById(id: string): BenchPreset | undefined {
  return PRESETS.find((p) => p.id === id);
}
