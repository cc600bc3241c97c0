// Whether a pass of the 'wasm' backend runs on the thread pool or on the calling thread alone, and into
// how many lists it is cut (listsFor): passes below MIN_WORK_PER_THREAD stay on the caller; for the
// others ThreadChoice measures, per kind of pass, one thread against all in trials. WasmKernels.run
// (kernels.ts) times each pass for it.

import { median } from '../util/stats.ts';
import type { ThreadPool } from './threads.ts';

/**
 * Below this many multiply-adds a pass runs on the calling thread alone, never tried on the threads:
 * handing work to a worker costs tens of microseconds (a postMessage round trip: 39 µs median, 58 µs
 * p90, Node 20 on a 2-core EPYC), and splitting `work` in two saves at most half of its time on one
 * thread, so it can only pay past 2 × that hand-off × one thread's rate (≈ 18M multiply-adds a
 * millisecond, so ≈ 1.4M). Measured (2-core Xeon VM, 2026-12-06, ThreadChoice's trials): a paged call's
 * projections of 8 rows at E 256, 786K and 524K multiply-adds, took 44 and 30 µs on one thread against
 * 59 and 77 µs on two; at the bound before (1 << 19) they were tried on the threads, losing, in a
 * session's first passes. A decode step's attention over 1024 keys at E=2048 is 2M (0.9 ms on one
 * thread on the EPYC): above it.
 */
export const MIN_WORK_PER_THREAD = 1 << 20;

/**
 * Lists a pass's work is cut into per thread when it runs on several: the threads claim them one at a
 * time (threads.ts), so that one slowed down (its core shared with another process) takes fewer.
 */
export const LISTS_PER_THREAD = 4;

/**
 * The lists a pass of `work` multiply-adds of kind `kind` is split into: 1 (the caller alone) for small
 * passes, on one thread, or where one thread was measured faster for this kind (ThreadChoice), else
 * LISTS_PER_THREAD a thread. Each list is computed as one thread computes it: results do not depend on
 * the split. Pass the lists to kernels.run with the same kind, which times them for the choice.
 */
export function listsFor(kernels: { threads: number; choice: ThreadChoice }, work: number, kind: string): number {
  if (work < MIN_WORK_PER_THREAD || kernels.threads === 1) return 1;
  return kernels.choice.threaded(kind) ? kernels.threads * LISTS_PER_THREAD : 1;
}

/** How ThreadChoice chooses: by measurement (the default), or always / never on the threads (tests). */
export type ThreadChoiceMode = 'measured' | 'always' | 'never';
let choiceMode: ThreadChoiceMode = 'measured';

/** Sets how every engine's 'wasm' passes choose their threads (tests; not public API). */
export function setThreadChoiceMode(mode: ThreadChoiceMode): void {
  choiceMode = mode;
}

/** Passes of a trial; passes between trials, at first and at most (the gap doubles while the trials confirm the choice); the window of trial times kept per kind and option; the margin threads must win by. */
const TRIAL = 16;
const PERIOD = 256;
const MAX_PERIOD = 8192;
const WINDOW = 5;
const MARGIN = 0.95;

/**
 * Whether a kind of pass (a projection of given sizes and rows, an attention of given shape) runs on
 * the threads or on the caller alone, measured rather than guessed (issue 41). Every pass of an engine
 * counts toward one schedule: a trial of TRIAL passes all on the threads, one of TRIAL passes all on the
 * caller alone, then passes where each kind takes what its trials measured (the threads only where
 * their median over the kind's last WINDOW trial passes is below MARGIN × one thread's; a kind not yet
 * measured both ways takes the threads), and again after PERIOD passes, a gap that doubles (up to
 * MAX_PERIOD) each time a trial leaves every kind's choice as it was, and starts over when one changes.
 * Trials cover every kind at once, so a trial measures the threads as they run when they run steadily:
 * a worker that took the previous pass a moment ago is still awake, where one asked once in a while
 * after a stretch on one thread sleeps (on a virtual machine its wake-up can cost more than a decode
 * step's pass). A kind's first pass in each trial is not counted (it pays for the switch), nor is a
 * layer's first pass of a kind on either side (WasmKernels.run: cold). The trials
 * repeat, so the choice follows the machine: another process taking a core makes the threads lose, and
 * the kinds move to one thread.
 */
export class ThreadChoice {
  private readonly kinds = new Map<string, { one: number[]; all: number[]; seen: number }>();
  /** Passes so far; where the current (or next) trial starts; the gap after it; the trial's number and the side of the pass being planned. */
  private passes = 0;
  private start = 0;
  private period = PERIOD;
  private trial = 0;
  private side: 'all' | 'one' | null = null;
  /** Every kind's choice after the last trial (to see whether a trial changed any). */
  private settled = '';

  /** Whether the next pass of `kind` runs on the threads. */
  threaded(kind: string): boolean {
    if (choiceMode !== 'measured') return choiceMode === 'always';
    const at = this.passes++ - this.start;
    if (at === 0) this.trial++;
    this.side = at < 0 ? null : at < TRIAL ? 'all' : at < 2 * TRIAL ? 'one' : null;
    if (at === 2 * TRIAL) this.afterTrial(); // this pass is the gap's first
    if (this.side) return this.side === 'all';
    const k = this.kinds.get(kind);
    if (!k || k.all.length === 0 || k.one.length === 0) return true;
    return median(k.all) < MARGIN * median(k.one);
  }

  /** A trial ended: the next one after the gap, doubled if no kind's choice changed. */
  private afterTrial(): void {
    const now = this.report()
      .map((r) => `${r.kind}=${r.threads}`)
      .join(';');
    this.period = now === this.settled ? Math.min(2 * this.period, MAX_PERIOD) : PERIOD;
    this.settled = now;
    this.start += 2 * TRIAL + this.period;
  }

  /** Records a pass of `kind` that took `ms`, on the threads or not: kept if it was a trial's (and not the kind's first in it). */
  record(kind: string, threaded: boolean, ms: number): void {
    if (choiceMode !== 'measured' || this.side === null || threaded !== (this.side === 'all')) return;
    let k = this.kinds.get(kind);
    if (!k) {
      k = { one: [], all: [], seen: 0 };
      this.kinds.set(kind, k);
    }
    const mark = 2 * this.trial + (threaded ? 0 : 1); // this trial, this side
    if (k.seen !== mark) {
      k.seen = mark; // the first pass of the kind in this trial
      return;
    }
    const times = threaded ? k.all : k.one;
    times.push(ms);
    if (times.length > WINDOW) times.shift();
  }

  /** The kinds measured so far and their choice (diagnostics, tests). */
  report(): { kind: string; threads: boolean | null; one: number | null; all: number | null }[] {
    return [...this.kinds].map(([kind, k]) => ({
      kind,
      threads: k.all.length && k.one.length ? median(k.all) < MARGIN * median(k.one) : null,
      one: k.one.length ? median(k.one) : null,
      all: k.all.length ? median(k.all) : null,
    }));
  }
}

const choices = new WeakMap<ThreadPool, ThreadChoice>();

/** The ThreadChoice of a pool's passes (every kernel instance on it: an engine's layers). */
export function choiceOf(pool: ThreadPool): ThreadChoice {
  let choice = choices.get(pool);
  if (!choice) {
    choice = new ThreadChoice();
    choices.set(pool, choice);
  }
  return choice;
}

/** A size class: n rounded down to a power of two (kinds of pass group sizes so). */
export function sizeClass(n: number): number {
  return n < 1 ? 0 : 2 ** Math.floor(Math.log2(n));
}
