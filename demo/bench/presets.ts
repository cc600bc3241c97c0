// The benchmark's preset shapes, smallest first. Self-attention, batch first, biases on.

import type { BenchPreset } from './types.ts';

export const PRESETS: BenchPreset[] = [
  { id: 'tiny', label: 'tiny — B=1 S=16 E=32 H=2', batchSize: 1, seqLen: 16, embedDim: 32, numHeads: 2, isCausal: false },
  { id: 's128-e256', label: 'small — B=1 S=128 E=256 H=4', batchSize: 1, seqLen: 128, embedDim: 256, numHeads: 4, isCausal: false },
  { id: 's512-e512', label: 'medium — B=1 S=512 E=512 H=8', batchSize: 1, seqLen: 512, embedDim: 512, numHeads: 8, isCausal: false },
  { id: 'bert-base', label: 'BERT-base — B=1 S=512 E=768 H=12', batchSize: 1, seqLen: 512, embedDim: 768, numHeads: 12, isCausal: false },
  { id: 'long-causal', label: 'long causal — B=1 S=2048 E=512 H=8, causal', batchSize: 1, seqLen: 2048, embedDim: 512, numHeads: 8, isCausal: true },
];

export function presetById(id: string): BenchPreset | undefined {
  return PRESETS.find((p) => p.id === id);
}
