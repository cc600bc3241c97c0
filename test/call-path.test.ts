// The call path, measured: how many stack frames lie between a public call and the dispatches it
// makes, and that each is a named function or method of src/, never a closure handed down to run
// later (STYLE notes 18 and 21; ARCHITECTURE.md names the frames).
//
// What is counted. During a real forward on the adapter, every dispatchWorkgroups on any compute pass
// records `new Error().stack` (the pass prototype is wrapped, as test/helpers/dispatches.ts wraps
// setPipeline; our wrapper's frame stands for dispatchWorkgroups itself). The frames are the stack's
// `at …` lines from that one down to the public entry point (MultiHeadAttention.forward,
// AttentionEngine.scaledDotProductAttention), both ends included. V8 keeps the callers an async
// function was awaited from on its stack (its async stack traces, printed `at async f` or, source
// mapped, `at f`), so a caller that awaited before calling on still shows; a function that returns a
// promise without awaiting it (no `async`) would not, which is why the entry points are async.
//
// A frame is a named function when it is `name` declared as `function name` in its file, or
// `Class.method` with `class Class` in its file; an arrow or function expression passed as an argument
// shows as an anonymous frame (`at file:line:col`) or under the name of the property that holds it
// (`Object.encode`), and fails the test.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { AttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { FAST_COMPILING } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';

interface Frame {
  /** The function as V8 names it (`Class.method`, `name`), or null when it has none. */
  name: string | null;
  file: string | null;
  line: string;
}

function framesOf(stack: string): Frame[] {
  return stack
    .split('\n')
    .filter((l) => l.trimStart().startsWith('at '))
    .map((l) => {
      const text = l.trim().replace(/^at (async )?/, '');
      const named = /^([\w$.<>]+) \((.*?):\d+:\d+\)$/.exec(text);
      if (named) return { name: named[1], file: named[2].replace(/^file:\/\//, ''), line: l.trim() };
      return { name: null, file: null, line: l.trim() };
    });
}

/** Whether `frame` is a function declared by name, or a method of a class, in its source file (not a closure). */
function declared(frame: Frame): boolean {
  if (!frame.name || !frame.file?.includes('/src/')) return false;
  const source = readFileSync(frame.file, 'utf8');
  const parts = frame.name.split('.');
  if (parts.length === 1) return new RegExp(`function ${parts[0]}\\b`).test(source);
  const [owner, method] = parts.slice(-2);
  return owner !== 'Object' && new RegExp(`class ${owner}\\b`).test(source) && new RegExp(`^\\s+(async\\s+)?${method}\\(`, 'm').test(source);
}

/** The stacks of every dispatch `work` makes, as frames from the dispatch down to the frame named `entry` (both included). */
async function dispatchStacks(device: GPUDevice, entry: string, work: () => Promise<unknown>): Promise<Frame[][]> {
  const encoder = device.createCommandEncoder({ label: 'callPath.probe' });
  const probe = encoder.beginComputePass({ label: 'callPath.probe' });
  const proto = Object.getPrototypeOf(probe) as GPUComputePassEncoder;
  probe.end();
  encoder.finish(); // never submitted
  const original = proto.dispatchWorkgroups;
  const limit = Error.stackTraceLimit;
  const stacks: string[] = [];
  Error.stackTraceLimit = 100;
  proto.dispatchWorkgroups = function (this: GPUComputePassEncoder, ...args: Parameters<GPUComputePassEncoder['dispatchWorkgroups']>) {
    stacks.push(new Error().stack ?? '');
    return original.apply(this, args);
  };
  try {
    await work();
  } finally {
    proto.dispatchWorkgroups = original;
    Error.stackTraceLimit = limit;
  }
  expect(stacks.length).toBeGreaterThan(0);
  return stacks.map((stack) => {
    const frames = framesOf(stack);
    const at = frames.findIndex((f) => f.name === entry);
    expect(at, `no ${entry} frame in\n${stack}`).toBeGreaterThan(0);
    return frames.slice(0, at + 1);
  });
}

const describeFrames = (frames: Frame[]) => frames.map((f) => f.line).join('\n');

let engine: AttentionEngine;
beforeAll(async () => {
  engine = await createGpuEngine(FAST_COMPILING);
});
afterAll(() => engine?.dispose());

describe('from the public call to the dispatch', () => {
  const config = { embedDim: 32, numHeads: 2 };
  const [B, S] = [2, 5];

  test("MultiHeadAttention.forward: the runtime's steps are taken in order by the layer, which calls forwardWebGPU itself", async () => {
    const layer = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
    const x = uniform(B * S * config.embedDim, 1, mulberry32(2));
    for (const frames of await dispatchStacks(engine.device!, 'MultiHeadAttention.forward', () => layer.forward(x, { batchSize: B, seqLen: S }))) {
      // Read from the entry point down: the entry, the backend's layer, the forward.
      const down = frames.map((f) => f.name).reverse();
      expect(down.slice(0, 3), describeFrames(frames)).toEqual(['MultiHeadAttention.forward', 'WebGPULayer.forward', 'forwardWebGPU']);
    }
    layer.dispose();
  });

  test('scaledDotProductAttention: the backend calls attendWebGPU itself', async () => {
    const [H, Dh] = [2, 8];
    const q = uniform(B * H * S * Dh, 1, mulberry32(3));
    const frames = await dispatchStacks(engine.device!, 'AttentionEngine.scaledDotProductAttention', () =>
      engine.scaledDotProductAttention(q, q, q, { batchSize: B, numHeads: H, seqLen: S, headDim: Dh }),
    );
    for (const f of frames) {
      expect(
        f
          .filter((x) => !x.line.includes('(node:')) // Node's own frames of an await resumed from a timer (runNextTicks, processTimers) under load
          .map((x) => x.name)
          .reverse()
          .slice(0, 3),
        describeFrames(f),
      ).toEqual(['AttentionEngine.scaledDotProductAttention', 'WebGPUBackend.attend', 'attendWebGPU']);
    }
  });

  test('MultiHeadAttention.forward to dispatchWorkgroups: at most 8 frames, each a named function of src/, no closure handed down', async () => {
    const layer = engine.createMultiHeadAttention(config, randomStateDict(config, 4));
    const x = uniform(B * S * config.embedDim, 1, mulberry32(5));
    for (const frames of await dispatchStacks(engine.device!, 'MultiHeadAttention.forward', () => layer.forward(x, { batchSize: B, seqLen: S }))) {
      expect(frames.length, describeFrames(frames)).toBeLessThanOrEqual(8);
      // frames[0] is the wrapper standing for dispatchWorkgroups.
      for (const frame of frames.slice(1)) expect(declared(frame), `${frame.line} is not a function or method declared by name\n${describeFrames(frames)}`).toBe(true);
    }
    layer.dispose();
  });
});
