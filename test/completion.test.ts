// src/webgpu/completion.ts: waits nudged with empty submits where completion is timer-driven (Firefox's
// 100 ms poll), and only there. A fake queue stands for each kind of implementation: one that notices
// finished work only on a timer or when something is submitted, and one that notices it at once. The
// real device (Dawn on lavapipe) is probed at the end: it is not timer-driven, so nothing is nudged.

import { describe, expect, test } from 'vitest';
import { completionInfo, NUDGE_BUDGET_MS, NUDGE_MAX_INTERVAL_MS, probeCompletion, TIMER_DRIVEN_MS, waitFor } from '../src/webgpu/completion.ts';
import { createGpuEngine } from './helpers/gpu.ts';

/** A device whose queue notices finished work every `pollMs`, or at once when anything is submitted (Firefox's behaviour). */
function timerDriven(pollMs: number) {
  const waiting: (() => void)[] = [];
  let submits = 0;
  const poll = () => {
    for (const done of waiting.splice(0)) done();
  };
  const timer = setInterval(poll, pollMs);
  const queue = {
    submit: () => {
      submits++;
      poll();
    },
    onSubmittedWorkDone: () => new Promise<undefined>((r) => waiting.push(() => r(undefined))),
  };
  /** Work that finishes after `ms` and is then noticed at the next poll. */
  const work = (ms: number) =>
    new Promise<void>((resolve) => {
      setTimeout(() => waiting.push(resolve), ms);
    });
  return { device: { queue } as unknown as GPUDevice, work, submits: () => submits, stop: () => clearInterval(timer) };
}

describe('completion: nudged where it is timer-driven', () => {
  test('a timer-driven queue is probed as such, and a wait on it ends soon after the work, not at the next 100 ms tick', async () => {
    const gpu = timerDriven(100);
    try {
      await probeCompletion(gpu.device);
      const info = completionInfo(gpu.device);
      expect(info.timerDriven).toBe(true);
      expect(info.probeMs).toBeGreaterThanOrEqual(TIMER_DRIVEN_MS);
      const t0 = performance.now();
      await waitFor(gpu.device, gpu.work(5));
      const ms = performance.now() - t0;
      // Work of 5 ms, then a nudge at most NUDGE_MAX_INTERVAL_MS later (timers in a loaded test process are late, so a margin).
      expect(ms).toBeLessThan(5 + NUDGE_MAX_INTERVAL_MS + 40);
      expect(gpu.submits()).toBeGreaterThan(0);
      // Once it has settled, nothing more is submitted.
      const after = gpu.submits();
      await new Promise((r) => setTimeout(r, 30));
      expect(gpu.submits()).toBe(after);
    } finally {
      gpu.stop();
    }
  });

  test('nudges stop after NUDGE_BUDGET_MS: the implementation timer answers a longer wait', async () => {
    const gpu = timerDriven(100);
    try {
      await probeCompletion(gpu.device);
      const never = new Promise<void>(() => {});
      void waitFor(gpu.device, never);
      await new Promise((r) => setTimeout(r, NUDGE_BUDGET_MS + 100));
      const n = gpu.submits();
      expect(n).toBeGreaterThan(0);
      expect(n).toBeLessThanOrEqual(Math.ceil(NUDGE_BUDGET_MS / NUDGE_MAX_INTERVAL_MS) + 8);
      await new Promise((r) => setTimeout(r, 50));
      expect(gpu.submits()).toBe(n);
    } finally {
      gpu.stop();
    }
  }, 10_000);

  test('a queue that notices work at once is probed as such, and its waits are never nudged', async () => {
    let submits = 0;
    const device = { queue: { submit: () => submits++, onSubmittedWorkDone: () => Promise.resolve(undefined) } } as unknown as GPUDevice;
    await probeCompletion(device);
    expect(completionInfo(device)).toMatchObject({ timerDriven: false, nudged: false });
    await waitFor(device, new Promise((r) => setTimeout(r, 30)));
    expect(submits).toBe(0);
  });

  test('waits hold their nudges while the probe measures (a nudge would make it fast)', async () => {
    const gpu = timerDriven(100);
    try {
      // A wait is pending while the probe runs: nudging it would resolve the probe early.
      const busy = waitFor(gpu.device, gpu.work(5));
      await probeCompletion(gpu.device);
      expect(completionInfo(gpu.device).timerDriven).toBe(true);
      await busy;
    } finally {
      gpu.stop();
    }
  });

  test('Dawn (lavapipe) notices work at once: the engine does not nudge it', async () => {
    const engine = await createGpuEngine();
    try {
      await probeCompletion(engine.device!);
      const info = completionInfo(engine.device!);
      expect(info.timerDriven).toBe(false);
      expect(info.nudged).toBe(false);
      expect(info.probeMs).toBeLessThan(TIMER_DRIVEN_MS);
    } finally {
      engine.dispose();
    }
  });
});
