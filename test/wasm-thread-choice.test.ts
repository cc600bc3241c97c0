// The 'wasm' backend's choice between one thread and all of them per kind of pass (src/wasm/kernels.ts
// ThreadChoice): measured, not guessed. One schedule for all of an engine's passes: a trial of 16 passes
// on the threads, one of 16 on one thread, then a gap where each kind takes what its trials measured
// (threads only by a margin; a kind not measured both ways takes the threads): 256 passes, doubled each
// time a trial confirms every choice. Times are given
// here, not measured: the logic is what is tested. That the results do not depend on the choice is
// test/wasm-threads.test.ts's and the other thread tests' (1 thread = 2 threads bit for bit).

import { afterEach, expect, test } from 'vitest';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { setThreadChoiceMode, ThreadChoice } from '../src/wasm/thread-choice.ts';
import type { KernelCall } from '../src/wasm/threads.ts';

afterEach(() => setThreadChoiceMode('measured'));

const CYCLE = 16 + 16 + 256;

/** Runs passes of the kinds in turn, each taking what `time` says for the option chosen; returns each kind's choices. */
function drive(choice: ThreadChoice, kinds: string[], passes: number, time: (kind: string, threaded: boolean, pass: number) => number): Record<string, boolean[]> {
  const out: Record<string, boolean[]> = Object.fromEntries(kinds.map((k) => [k, []]));
  for (let i = 0; i < passes; i++) {
    const kind = kinds[i % kinds.length];
    const threaded = choice.threaded(kind);
    out[kind].push(threaded);
    choice.record(kind, threaded, time(kind, threaded, i));
  }
  return out;
}

test('a trial on the threads, one on one thread, then the faster option, and the trials again', () => {
  const choice = new ThreadChoice();
  const { a } = drive(choice, ['a'], 2 * CYCLE, (_, threaded) => (threaded ? 5 : 9));
  expect(a.slice(0, 16).every((t) => t)).toBe(true);
  expect(a.slice(16, 32).every((t) => !t)).toBe(true);
  expect(a.slice(32, CYCLE).every((t) => t)).toBe(true);
  expect(a.slice(CYCLE + 16, CYCLE + 32).every((t) => !t)).toBe(true); // the next cycle's trial on one thread
  expect(choice.report()).toEqual([{ kind: 'a', threads: true, one: 9, all: 5 }]);
});

test('threads slower than one thread: one thread between the trials', () => {
  const choice = new ThreadChoice();
  const { a } = drive(choice, ['a'], CYCLE, (_, threaded) => (threaded ? 2 : 1));
  expect(a.slice(32).some((t) => t)).toBe(false);
  expect(choice.report()[0].threads).toBe(false);
});

test('threads must win by the margin: 3 % faster is not enough', () => {
  const choice = new ThreadChoice();
  drive(choice, ['a'], CYCLE, (_, threaded) => (threaded ? 0.97 : 1));
  expect(choice.report()[0].threads).toBe(false);
});

test("a kind's first pass in each trial is not counted (it pays for the switch)", () => {
  const choice = new ThreadChoice();
  // The first threaded pass of each trial is slow (a worker waking up), the rest fast.
  drive(choice, ['a'], CYCLE, (_, threaded, i) => (threaded ? (i % CYCLE === 0 ? 100 : 1) : 2));
  expect(choice.report()[0]).toEqual({ kind: 'a', threads: true, one: 2, all: 1 });
});

test('kinds are measured apart, in the same trials', () => {
  const choice = new ThreadChoice();
  const picks = drive(choice, ['proj', 'attend', 'out'], 3 * CYCLE, (kind, threaded) => (kind === 'attend' ? (threaded ? 3 : 1) : threaded ? 1 : 3));
  expect(Object.fromEntries(choice.report().map((r) => [r.kind, r.threads]))).toEqual({ proj: true, attend: false, out: true });
  expect(picks.attend.slice(20, 90).some((t) => t)).toBe(false);
  expect(picks.proj.slice(20, 90).every((t) => t)).toBe(true);
});

test('the gap between trials doubles while they confirm the choice; a change moves the choice at the next trial and the gap starts over', () => {
  const choice = new ThreadChoice();
  // Trials start at passes 0, 288 (gap 256), 832 (512: confirmed), 1888 (1024: confirmed), …
  // Threads win 2× until pass 1000, then lose 2× (a process beside takes a core).
  const { a } = drive(choice, ['a'], 2700, (_, threaded, i) => (i < 1000 ? (threaded ? 1 : 2) : threaded ? 4 : 2));
  const trials = (from: number, to: number) => a.slice(from, to);
  expect(trials(288, 304).every((t) => t) && trials(304, 320).every((t) => !t)).toBe(true); // the second trial
  expect(trials(320, 832).every((t) => t)).toBe(true); // a gap of 512 on the threads
  expect(trials(864, 1888).every((t) => t)).toBe(true); // 1024, still the old choice after the change
  expect(trials(1920, 2176).some((t) => t)).toBe(false); // the trial at 1888 moved it; the gap is 256 again
  expect(trials(2176, 2192).every((t) => t)).toBe(true); // … so the next trial comes at 1920 + 256
  expect(trials(2208, 2700).some((t) => t)).toBe(false); // it confirms: a gap of 512
  expect(choice.report()[0].threads).toBe(false);
});

test("the modes 'always' and 'never' override the measurement (tests of the threads use 'always')", () => {
  const choice = new ThreadChoice();
  setThreadChoiceMode('always');
  expect(drive(choice, ['x'], 64, (_, threaded) => (threaded ? 9 : 1)).x.every((p) => p)).toBe(true);
  setThreadChoiceMode('never');
  expect(drive(choice, ['x'], 64, () => 1).x.some((p) => p)).toBe(false);
});

test("a layer's first pass of a kind on each side is not evidence (cold: its weights first read, a worker's instance first run)", async () => {
  const kernels = new WasmKernels(await compileKernels('single'));
  const recorded: [string, boolean][] = [];
  kernels.choice.record = (kind, threaded) => void recorded.push([kind, threaded]);
  const a = kernels.alloc(64);
  const out = kernels.alloc(64 * 64);
  const call: KernelCall = ['transpose', a, 1, 64, 1, out];
  for (let i = 0; i < 3; i++) await kernels.run([[call]], 'k'); // on this thread alone
  for (let i = 0; i < 2; i++) await kernels.run([[call], [call]], 'k'); // the threads' side (lists > 1)
  await kernels.run([[call]], 'other');
  expect(recorded).toEqual([
    ['k', false],
    ['k', false],
    ['k', true],
  ]);
  // Another layer (kernel instance) has its own first passes.
  const next = new WasmKernels(await compileKernels('single'));
  const seen: string[] = [];
  next.choice.record = (kind) => void seen.push(kind);
  const b = next.alloc(64);
  const nextOut = next.alloc(64 * 64);
  for (let i = 0; i < 2; i++) await next.run([[['transpose', b, 1, 64, 1, nextOut]]], 'k');
  expect(seen).toEqual(['k']);
});
