// How a sweep decides, from timings that noise moves: pure functions of the samples, so the rule can
// be tested with made-up numbers (test/tuning.test.ts).
//
// The trials are interleaved: round after round, every candidate runs once, in an order that rotates,
// so a burst of load elsewhere slows all of them rather than one. A candidate's figure is its fastest
// run (noise only ever adds time), its spread how far its median lies above that. The built-in choice
// is kept unless another candidate beats it clearly (by MARGIN on the fastest runs) and consistently
// (in most rounds, run against run); and nothing measured while the spread was large is decided on or
// remembered: the built-in choice stays and the next engine measures again.
//
// A clock can also be unable to tell the candidates apart. Firefox notices finished GPU work on a
// 100 ms timer: timed by the wall clock, every candidate took 99–100 ms there, the timer's step and
// not the kernels. Trials are timed by timestamp queries where the device has them (trial.ts); on the
// wall clock, candidates that all lie within the clock's known step of each other, or all took the
// same time of at least TIMER_FLOOR_MS (a floor), decide nothing and are not remembered (`unusable`).

import { median } from '../../util/stats.ts';

/** A candidate must be at least this much faster than the built-in choice to replace it. */
export const MARGIN = 0.1;
/** Spreads ((median − fastest) / fastest) above this mean the machine was busy: decide nothing. */
export const MAX_SPREAD = 0.25;
/** Wall-clock candidates all at least this slow and within FLOOR_SPREAD of each other: a completion timer's floor. */
export const TIMER_FLOOR_MS = 20;
export const FLOOR_SPREAD = 0.03;

/** How a sweep's trials were timed. */
export interface TrialClock {
  /** Timestamp queries around the trial's pass, or wall time from submit to completion. */
  kind: 'gpu-timestamps' | 'wall-clock';
  /** The smallest difference this clock can show per sample, ms (a timer-driven completion's step); 0: none known. */
  stepMs: number;
}

/** Rounds of trials (every candidate once per round). */
export const ROUNDS = 5;
/** The share of rounds in which the winner must beat the built-in choice run against run. */
export const CONSISTENCY = 0.8;

export interface Decision {
  /** What to run. */
  variant: string;
  /** Fastest run of each candidate, ms. */
  timesMs: Record<string, number>;
  /** (median − fastest) / fastest of each candidate. */
  spreads: Record<string, number>;
  /** Whether the decision may be remembered (the measurement was steady). */
  steady: boolean;
  /** Why this variant. */
  reason: string;
  /** Set when the clock could not tell the candidates apart (the built-in choice runs, nothing is remembered): why. */
  unusable?: string;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * Decides from `samples` (each candidate's run times, one per round, rounds aligned) whether a
 * candidate replaces `builtIn`. `builtIn` must be among the samples unless it was refused (then the
 * fastest candidate runs, as the only correct choice).
 */
export function decide(samples: Record<string, readonly number[]>, builtIn: string, clock?: TrialClock): Decision {
  const names = Object.keys(samples);
  const timesMs: Record<string, number> = {};
  const spreads: Record<string, number> = {};
  for (const name of names) {
    const fastest = Math.min(...samples[name]);
    timesMs[name] = round3(fastest);
    spreads[name] = round3((median(samples[name]) - fastest) / fastest);
  }
  const best = names.reduce((a, b) => (timesMs[b] < timesMs[a] ? b : a));
  const pct = (x: number) => `${Math.round(x * 100)}%`;
  const unusable = clock?.kind === 'wall-clock' ? unusableTimes(Object.values(timesMs), clock) : null;
  if (unusable) {
    const variant = builtIn in samples ? builtIn : best;
    return {
      variant,
      timesMs,
      spreads,
      steady: false,
      reason: `timings unusable: ${unusable}; kept ${variant === builtIn ? 'the built-in choice' : variant}, not remembered`,
      unusable,
    };
  }
  if (!(builtIn in samples)) {
    return { variant: best, timesMs, spreads, steady: spreads[best] <= MAX_SPREAD, reason: `the built-in ${builtIn} was refused; ${best} is the fastest correct one` };
  }
  const steady = spreads[best] <= MAX_SPREAD && spreads[builtIn] <= MAX_SPREAD;
  if (best === builtIn) return { variant: builtIn, timesMs, spreads, steady, reason: 'the built-in choice is the fastest' };
  if (!steady) {
    const noisy = spreads[best] > MAX_SPREAD ? best : builtIn;
    return {
      variant: builtIn,
      timesMs,
      spreads,
      steady,
      reason: `too noisy to decide: ${noisy}'s runs spread by ${pct(spreads[noisy])} (over ${pct(MAX_SPREAD)}); kept the built-in choice, not remembered`,
    };
  }
  const gain = 1 - timesMs[best] / timesMs[builtIn];
  const rounds = Math.min(samples[best].length, samples[builtIn].length);
  let wins = 0;
  for (let i = 0; i < rounds; i++) if (samples[best][i] < samples[builtIn][i]) wins++;
  if (gain < MARGIN) {
    return { variant: builtIn, timesMs, spreads, steady, reason: `${best} is faster by ${pct(gain)} only (under ${pct(MARGIN)}): kept the built-in choice` };
  }
  if (wins < CONSISTENCY * rounds) {
    return { variant: builtIn, timesMs, spreads, steady, reason: `${best} won ${wins} of ${rounds} rounds only: kept the built-in choice` };
  }
  return { variant: best, timesMs, spreads, steady, reason: `${best} is ${pct(gain)} faster than the built-in ${builtIn}, in ${wins} of ${rounds} rounds` };
}

/** Why wall-clock figures (each candidate's fastest) cannot tell the candidates apart, or null when they can. */
function unusableTimes(fastest: readonly number[], clock: TrialClock): string | null {
  if (fastest.length < 2) return null;
  const lo = Math.min(...fastest);
  const hi = Math.max(...fastest);
  const ms = (x: number) => `${round3(x)} ms`;
  if (clock.stepMs > 0 && hi - lo <= clock.stepMs) {
    return `every candidate took ${ms(lo)}–${ms(hi)}, within the wall clock's step here (${ms(clock.stepMs)}: completion is timer-driven)`;
  }
  if (lo >= TIMER_FLOOR_MS && hi <= lo * (1 + FLOOR_SPREAD)) {
    return `every candidate took ${ms(lo)}–${ms(hi)}: a floor (a completion timer), not the kernels`;
  }
  return null;
}

/**
 * Runs `rounds` rounds of `time` over `variants`, each round in an order rotated by one, and returns
 * each variant's times by round. `time` runs one variant once and resolves with its milliseconds.
 */
export async function interleave(variants: readonly string[], time: (variant: string) => Promise<number>, rounds = ROUNDS): Promise<Record<string, number[]>> {
  const samples: Record<string, number[]> = Object.fromEntries(variants.map((v) => [v, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < variants.length; i++) {
      const variant = variants[(i + round) % variants.length];
      samples[variant].push(await time(variant));
    }
  }
  return samples;
}
