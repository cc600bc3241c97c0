// engine.stats().peakBytes: the high-water mark of the GPU memory an engine held. It covers the
// scratch a call frees (or that is trimmed when its layer is disposed), agrees with an independent
// count of every buffer the device created and destroyed, grows with S, and survives a device loss.

import { describe, expect, test } from 'vitest';
import { type AttentionEngine, createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const L = { embedDim: 64, numHeads: 4 };
const sd = randomStateDict(L, 5);
const E = L.embedDim;
const weightBytes = (3 * E * E + 3 * E + E * E + E) * 4;

const engines = useEngines();

/**
 * Counts the bytes of the buffers `device` creates and that are not destroyed yet, and their maximum,
 * by wrapping device.createBuffer and each buffer's destroy(): an account kept apart from the engine's.
 */
function trackDevice(device: GPUDevice): { live: () => number; peak: () => number; stop: () => void } {
  const original = device.createBuffer;
  let live = 0;
  let peak = 0;
  device.createBuffer = (descriptor: GPUBufferDescriptor): GPUBuffer => {
    const buffer = original.call(device, descriptor);
    const destroy = buffer.destroy;
    let gone = false;
    live += buffer.size;
    peak = Math.max(peak, live);
    buffer.destroy = (): undefined => {
      if (!gone) live -= buffer.size;
      gone = true;
      return destroy.call(buffer);
    };
    return buffer;
  };
  return {
    live: () => live,
    peak: () => peak,
    stop: () => {
      device.createBuffer = original;
    },
  };
}

/** One forward of a fresh layer at sequence length S; the engine's stats before and after. */
async function oneForward(engine: AttentionEngine, S: number) {
  const mha = engine.createMultiHeadAttention(L, sd);
  const afterWeights = engine.stats();
  await withErrorScopes(engine.device!, () => mha.forward(uniform(S * E, 1, mulberry32(S)), { batchSize: 1, seqLen: S }));
  const afterCall = engine.stats();
  mha.dispose(); // the weights go, and the idle scratch is trimmed
  const afterDispose = engine.stats();
  return { afterWeights, afterCall, afterDispose };
}

describe('engine.stats().peakBytes', () => {
  test('covers the scratch a call used after it is freed and trimmed, and equals an independent count', async () => {
    const device = engines.gpu.device!;
    const tracker = trackDevice(device);
    const engine = await createAttentionEngine({ device }); // an engine of its own: its peak starts at 0
    try {
      expect(engine.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
      const S = 512;
      const { afterWeights, afterCall, afterDispose } = await oneForward(engine, S);
      // The weights alone: held and peak agree.
      expect(afterWeights.bytes).toBeGreaterThanOrEqual(weightBytes);
      expect(afterWeights.peakBytes).toBe(afterWeights.bytes);
      // During the call the QKV projection holds its input [S, E] and Q, K, V (3·[S, E]) at once, beside the weights.
      expect(afterCall.peakBytes).toBeGreaterThanOrEqual(afterWeights.bytes + 4 * S * E * 4);
      expect(afterCall.peakBytes).toBeGreaterThanOrEqual(afterCall.bytes);
      // After dispose nothing is held, and the peak still says what the call needed.
      expect(afterDispose.bytes).toBe(0);
      expect(afterDispose.buffers).toBe(0);
      expect(afterDispose.peakBytes).toBe(afterCall.peakBytes);
      // The engine's account equals the one kept by wrapping the device.
      expect(tracker.live()).toBe(0);
      expect(afterDispose.peakBytes).toBe(tracker.peak());
    } finally {
      tracker.stop();
      engine.dispose();
    }
  });

  test('grows with S; a smaller call afterwards leaves it where it was', async () => {
    const scratchPeak: number[] = [];
    for (const S of [256, 1024]) {
      const engine = await createAttentionEngine({ device: engines.gpu.device! });
      const { afterWeights, afterDispose } = await oneForward(engine, S);
      scratchPeak.push(afterDispose.peakBytes - afterWeights.bytes);
      engine.dispose();
    }
    // Scratch is linear in S here (no needWeights); size classes round up by at most 25 %.
    expect(scratchPeak[1]).toBeGreaterThan(3 * scratchPeak[0]);
    expect(scratchPeak[1]).toBeLessThan(5 * scratchPeak[0]);

    const engine = await createGpuEngine();
    const big = await oneForward(engine, 1024);
    const small = await oneForward(engine, 64);
    expect(small.afterDispose.peakBytes).toBe(big.afterDispose.peakBytes);
    const bigger = await oneForward(engine, 2048);
    expect(bigger.afterDispose.peakBytes).toBeGreaterThan(big.afterDispose.peakBytes);
    engine.dispose();
  });

  test("is kept across a device loss (the engine's peak, not one device's)", async () => {
    const engine = await createGpuEngine();
    const mha = engine.createMultiHeadAttention(L, sd);
    await mha.forward(uniform(512 * E, 1, mulberry32(1)), { batchSize: 1, seqLen: 512 });
    const before = engine.stats().peakBytes;
    engine.device!.destroy();
    await mha.forward(uniform(8 * E, 1, mulberry32(2)), { batchSize: 1, seqLen: 8 }); // runs on a new device
    expect(engine.stats().bytes).toBeLessThan(before);
    expect(engine.stats().peakBytes).toBe(before);
    engine.dispose();
  });

  test('the CPU backend reports zeros', async () => {
    const mha = engines.cpu.createMultiHeadAttention(L, sd);
    await mha.forward(uniform(16 * E, 1, mulberry32(3)), { batchSize: 1, seqLen: 16 });
    expect(engines.cpu.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
    mha.dispose();
  });
});
