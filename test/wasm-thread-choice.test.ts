// The 'wasm' backend's choice between one thread and all of them per kind of pass (src/wasm/kernels.ts
// ThreadChoice): measured, not guessed. The first calls of a kind alternate; then the faster option by
// the median of recent calls (threads only by a margin); every RECHECK-th call tries the other option
// again, so a change in the machine (another process taking a core) moves the choice. Times are given
// here, not measured: the logic is what is tested. That the results do not depend on the choice is
// test/wasm-threads.test.ts's and the other thread tests' (1 thread = 2 threads bit for bit).

import { afterEach, expect, test } from 'vitest';
import { setThreadChoiceMode, ThreadChoice } from '../src/wasm/kernels.ts';

afterEach(() => setThreadChoiceMode('measured'));

/** Runs `calls` passes of `kind`, each taking what `time` says for the option chosen; returns the choices. */
function drive(choice: ThreadChoice, kind: string, calls: number, time: (threaded: boolean, i: number) => number): boolean[] {
  const out: boolean[] = [];
  for (let i = 0; i < calls; i++) {
    const threaded = choice.threaded(kind);
    out.push(threaded);
    choice.record(kind, threaded, time(threaded, i));
  }
  return out;
}

test('the first calls alternate, then the faster option is kept, the other retried every 16th call', () => {
  const choice = new ThreadChoice();
  const picks = drive(choice, 'prefill', 64, (threaded) => (threaded ? 5 : 9));
  expect(picks.slice(0, 6)).toEqual([true, false, true, false, true, false]);
  const later = picks.slice(6);
  expect(later.filter((p) => !p).length).toBeGreaterThanOrEqual(2); // rechecks
  expect(later.filter((p) => !p).length).toBeLessThanOrEqual(5);
  expect(choice.report()).toEqual([{ kind: 'prefill', threads: true, one: 9, all: 5 }]);
});

test('threads slower than one thread: one thread is chosen', () => {
  const choice = new ThreadChoice();
  const picks = drive(choice, 'decode', 64, (threaded) => (threaded ? 2 : 1));
  expect(picks.slice(6).filter((p) => p).length).toBeLessThanOrEqual(5);
  expect(choice.report()[0].threads).toBe(false);
});

test('threads must win by the margin: 3 % faster is not enough', () => {
  const choice = new ThreadChoice();
  drive(choice, 'even', 40, (threaded) => (threaded ? 0.97 : 1));
  expect(choice.report()[0].threads).toBe(false);
});

test('when the machine changes (a process takes a core), the choice follows within a few rechecks', () => {
  const choice = new ThreadChoice();
  // 200 calls where threads win 2×, then 200 where they lose 2× (a busy process beside).
  const picks = drive(choice, 'step', 400, (threaded, i) => (i < 200 ? (threaded ? 1 : 2) : threaded ? 4 : 2));
  expect(picks.slice(150, 200).filter((p) => p).length).toBeGreaterThan(40);
  expect(picks.slice(350).filter((p) => p).length).toBeLessThan(10);
  expect(choice.report()[0].threads).toBe(false);
});

test('kinds are measured apart', () => {
  const choice = new ThreadChoice();
  for (let i = 0; i < 40; i++) {
    for (const [kind, fast] of [
      ['a', true],
      ['b', false],
    ] as const) {
      const threaded = choice.threaded(kind);
      choice.record(kind, threaded, threaded === fast ? 1 : 3);
    }
  }
  expect(Object.fromEntries(choice.report().map((r) => [r.kind, r.threads]))).toEqual({ a: true, b: false });
});

test("the modes 'always' and 'never' override the measurement (tests of the threads use 'always')", () => {
  const choice = new ThreadChoice();
  setThreadChoiceMode('always');
  expect(drive(choice, 'x', 20, (threaded) => (threaded ? 9 : 1)).every((p) => p)).toBe(true);
  setThreadChoiceMode('never');
  expect(drive(choice, 'x', 20, () => 1).some((p) => p)).toBe(false);
});
