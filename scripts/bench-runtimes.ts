// `npm run bench -- --firefox` and `npm run bench -- --deno` (both together for the comparison): the
// figures of issue 26 ("Readback latency") and the Firefox targets, measured by demo/bench/runtime-figures.ts
//   in Firefox: the page demo/bench/runtime-figures.html on the engine's sources, served by Vite, in
//     firefox-esr headless on a fresh profile (scripts/firefox.ts, as npm run test:firefox runs it);
//   in Deno: test/deno/bench-figures.ts on the built package (dist/, built first where stale: scripts/deno.mjs).
// Both on lavapipe here, with Mesa's default compiler settings (not the tests' GALLIVM_PERF=nopt: the
// kernels a user runs). One runtime after the other, never together. Prints a table and the targets:
//   Firefox (a) B=1 S=16 E=64 H=4, tuning off: median ≤ 25 ms;
//   Firefox (b) B=1 S=128 E=256 H=4, tuning off: median within 1.3× of Deno's (b) median;
//   Firefox (c) default tuning: engine.settled() within 60 s of the first forward, and no forward
//     meanwhile over 2× the settled median.
// and writes everything to JSON (bench-results/runtimes-<date>.json, or --out).
// BENCH_FIREFOX_ENGINE=/path/index.js (a path under the repo, as the page's server serves it, e.g. a copy
// of dist/) measures that build in Firefox instead of the sources, BENCH_DENO_ENGINE=path/index.js (from
// the repo root) that build in Deno instead of dist/; BENCH_RUNTIME_TIMEOUT_S bounds each
// runtime's run (default 900).

import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { RuntimeFigures } from '../demo/bench/runtime-figures.ts';
import { type GoalRow, goalsText } from './bench-report.ts';
import { deno, denoEnv, denoMissing, ensureDist, icd, root } from './deno.mjs';
import { FIREFOX, firefoxMissing, startFirefox } from './firefox.ts';

type Runtime = 'firefox' | 'deno';
interface Measured {
  runtime: Runtime;
  /** What ran: the browser's version, or Deno's. */
  version: string;
  figures: RuntimeFigures | null;
  error: string | null;
  wallS: number;
}

const LIMIT_S = Number(process.env.BENCH_RUNTIME_TIMEOUT_S ?? 900); // each runtime's whole run

const log = (runtime: Runtime, line: string) => console.log(`  ${runtime}: ${line}`);

async function inFirefox(runs: number, port: number): Promise<Measured> {
  const t0 = performance.now();
  const wallS = () => Math.round((performance.now() - t0) / 100) / 10;
  const missing = firefoxMissing();
  if (missing) return { runtime: 'firefox', version: FIREFOX, figures: null, error: missing, wallS: 0 };
  const session = await startFirefox(port, { protocolTimeoutMs: LIMIT_S * 1000, fastCompiles: false });
  const version = await session.browser.version();
  log('firefox', `${version} at ${FIREFOX}, ${session.base}, VK_ICD_FILENAMES=${session.icd}`);
  try {
    const page = await session.browser.newPage();
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.text().startsWith('figures: ')) log('firefox', m.text().slice(9));
      else if (m.type() === 'error') problems.push(`console.error: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e instanceof Error ? e.message : String(e)}`));
    const engine = process.env.BENCH_FIREFOX_ENGINE;
    await page.goto(`${session.base}/demo/bench/runtime-figures.html${engine ? `?engine=${encodeURIComponent(engine)}` : ''}`);
    await page.waitForFunction(() => window.figuresReady === true, { timeout: 60_000 });
    const figures = await page.evaluate(async (n) => JSON.stringify(await window.runFigures({ runs: n })), runs);
    await page.close();
    return { runtime: 'firefox', version, figures: JSON.parse(figures), error: problems.length ? problems.join('\n') : null, wallS: wallS() };
  } catch (e) {
    const tail = session.stderr.slice(-10).join('\n');
    return { runtime: 'firefox', version, figures: null, error: `${(e as Error).message}${tail ? `\nFirefox's last stderr lines:\n${tail}` : ''}`, wallS: wallS() };
  } finally {
    await session.close();
  }
}

async function inDeno(runs: number): Promise<Measured> {
  const t0 = performance.now();
  const wallS = () => Math.round((performance.now() - t0) / 100) / 10;
  const missing = denoMissing() ?? ensureDist(LIMIT_S, (line) => log('deno', line));
  if (missing) return { runtime: 'deno', version: deno, figures: null, error: missing, wallS: wallS() };
  const dir = mkdtempSync(join(tmpdir(), 'webgpu-attention-deno-bench-'));
  const file = join(dir, 'figures.json');
  try {
    const args = ['run', '--unstable-webgpu', '-A', join(root, 'test', 'deno', 'bench-figures.ts'), file, String(runs)];
    log('deno', `VK_ICD_FILENAMES=${icd} ${deno} ${args.join(' ')}`);
    const child = spawn(deno, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: denoEnv(false) });
    const errors: string[] = [];
    const lines = (chunk: Buffer, each: (l: string) => void) => chunk.toString().split('\n').filter(Boolean).forEach(each);
    child.stdout.on('data', (c: Buffer) => lines(c, (l) => log('deno', l.replace(/^figures: /, ''))));
    child.stderr.on('data', (c: Buffer) => lines(c, (l) => errors.push(l)));
    const timer = setTimeout(() => child.kill('SIGKILL'), LIMIT_S * 1000);
    const code = await new Promise<number | string>((done) => child.on('exit', (c, s) => done(c ?? s ?? 'unknown')));
    clearTimeout(timer);
    const version = (await new Promise<string>((done) => {
      const v = spawn(deno, ['--version'], { env: denoEnv(false) });
      let text = '';
      v.stdout.on('data', (c: Buffer) => {
        text += c.toString();
      });
      v.on('exit', () => done(text.split('\n')[0] || deno));
      v.on('error', () => done(deno));
    })) as string;
    if (code !== 0) return { runtime: 'deno', version, figures: null, error: `Deno exited with ${code}: ${errors.slice(-10).join('\n')}`, wallS: wallS() };
    const figures = JSON.parse(readFileSync(file, 'utf8')) as RuntimeFigures;
    return { runtime: 'deno', version, figures, error: errors.length ? errors.slice(-10).join('\n') : null, wallS: wallS() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const ms = (x: number | undefined) => (x === undefined ? '—' : x >= 100 ? x.toFixed(0) : x.toFixed(1));

function figuresTable(measured: Measured[]): string {
  const rows: [string, ...string[]][] = [['', ...measured.map((m) => m.runtime)]];
  const row = (label: string, cell: (f: RuntimeFigures) => string) => rows.push([label, ...measured.map((m) => (m.figures ? cell(m.figures) : 'failed'))]);
  row('(a) S=16 E=64, off: median ms', (f) => ms(f.small.medianMs));
  row('(a) best ms', (f) => ms(f.small.bestMs));
  row('(b) S=128 E=256, off: median ms', (f) => ms(f.medium.medianMs));
  row('(b) best ms', (f) => ms(f.medium.bestMs));
  for (const [tag, pick] of [
    ['(c) default tuning', (f: RuntimeFigures) => f.settle],
    ['(d) background: true', (f: RuntimeFigures) => f.settleBackground],
  ] as const) {
    row(`${tag}: background work`, (f) => (pick(f).background ? (pick(f).background!.enabled ? 'on' : 'off') : '—'));
    row(`${tag}: settled after s`, (f) => (pick(f).settleMs / 1000).toFixed(1));
    row(`${tag}: forwards during the settle`, (f) => String(pick(f).duringSettleMs.length));
    row(`${tag}: the first forward ms`, (f) => ms(pick(f).duringSettleMs[0]));
    row(`${tag}: longest after the first ms`, (f) => ms(pick(f).duringSettleMs.length > 1 ? Math.max(...pick(f).duringSettleMs.slice(1)) : undefined));
    row(`${tag}: of them over 2× settled median`, (f) => String(pick(f).overTwiceSettled));
    row(`${tag}: background compiles (sum s)`, (f) => `${pick(f).compiled.length} (${(pick(f).compiled.reduce((t, c) => t + c.ms, 0) / 1000).toFixed(1)})`);
    row(`${tag}: settled median ms`, (f) => ms(pick(f).settledMedianMs));
    row(`${tag}: settled best ms`, (f) => ms(pick(f).settledBestMs));
    row(
      `${tag}: chosen variants`,
      (f) =>
        pick(f)
          .choices.map((c) => c.variant)
          .join(', ') || '—',
    );
  }
  row('timing.clock', (f) => f.settle.timing?.clock ?? '—');
  row('timing.completionMs', (f) => (f.settle.timing?.completionMs == null ? 'null' : f.settle.timing.completionMs.toFixed(1)));
  row('timing.timerDriven / nudged', (f) => `${f.settle.timing?.timerDriven} / ${f.settle.timing?.nudged}`);
  row('choices (unusable of them)', (f) => `${f.settle.choices.length} (${f.settle.unusableCount})`);
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')).join('\n');
}

function targets(measured: Measured[]): GoalRow[] {
  const ff = measured.find((m) => m.runtime === 'firefox')?.figures;
  const dn = measured.find((m) => m.runtime === 'deno')?.figures;
  const notRun = (goal: string, note: string): GoalRow => ({ goal, figure: '—', status: 'not measured', note });
  const row = (goal: string, ok: boolean, figure: string, note?: string): GoalRow => ({ goal, figure, status: ok ? 'met' : 'missed', ...(note ? { note } : {}) });
  const ffMissing = 'Firefox did not run (npm run bench -- --firefox)';
  const goals: GoalRow[] = [];
  const a = 'Firefox (a) B=1 S=16 E=64 H=4, tuning off: median forward ≤ 25 ms';
  goals.push(ff ? row(a, ff.small.medianMs <= 25, `${ms(ff.small.medianMs)} ms`) : notRun(a, ffMissing));
  const b = "Firefox (b) B=1 S=128 E=256 H=4, tuning off: median within 1.3× of Deno's";
  if (ff && dn) {
    const ratio = ff.medium.medianMs / dn.medium.medianMs;
    goals.push(row(b, ratio <= 1.3, `${ratio.toFixed(2)}×`, `Firefox ${ms(ff.medium.medianMs)} ms, Deno ${ms(dn.medium.medianMs)} ms`));
  } else goals.push(notRun(b, 'needs both runtimes: npm run bench -- --firefox --deno'));
  const c1 = 'Firefox (c) default tuning: engine.settled() within 60 s of the first forward';
  goals.push(ff ? row(c1, ff.settle.settleMs <= 60_000, `${(ff.settle.settleMs / 1000).toFixed(1)} s`) : notRun(c1, ffMissing));
  // The first forward compiles the kernels it runs (tier 0, or on wgpu the final ones): that is the
  // first call's cost, not background work's; the goal is about the forwards after it.
  const c2 = 'Firefox (c) no forward during the settle, after the first, over 2× the settled median';
  if (ff) {
    const s = ff.settle;
    const later = s.duringSettleMs.slice(1);
    const worst = later.length ? Math.max(...later) / s.settledMedianMs : 0;
    const note =
      `${s.duringSettleMs.length} forwards during the settle (background work ${s.background?.enabled ? 'on' : 'off'}); the first ${ms(s.duringSettleMs[0])} ms, ` +
      `${later.length ? `the longest after it ${ms(Math.max(...later))} ms` : 'none after it'}; settled median ${ms(s.settledMedianMs)} ms; ${s.overTwiceSettled} over 2×. ` +
      `With background: true: longest after the first ${ms(ff.settleBackground.duringSettleMs.length > 1 ? Math.max(...ff.settleBackground.duringSettleMs.slice(1)) : undefined)} ms, ${ff.settleBackground.overTwiceSettled} over 2× (median ${ms(ff.settleBackground.settledMedianMs)})`;
    goals.push(row(c2, worst <= 2, later.length ? `${worst.toFixed(2)}×` : 'no forward after the first', note));
  } else goals.push(notRun(c2, ffMissing));
  return goals;
}

export async function benchRuntimes(options: { firefox: boolean; deno: boolean; runs: number; port: number; out: string }): Promise<number> {
  const runs = Math.max(15, options.runs);
  console.log(`figures of issue 26 in ${[options.firefox && 'Firefox', options.deno && 'Deno'].filter(Boolean).join(' and ')}: 3 warm-ups, ${runs} timed forwards each`);
  const measured: Measured[] = [];
  if (options.firefox) measured.push(await inFirefox(runs, options.port));
  if (options.deno) measured.push(await inDeno(runs));
  for (const m of measured) {
    if (m.error) console.log(`\n${m.runtime}: ${m.figures ? 'ran, but reported' : 'FAILED'}: ${m.error}`);
  }
  console.log(`\n${figuresTable(measured)}`);
  for (const m of measured) {
    const f = m.figures;
    if (f) console.log(`${m.runtime}: ${m.version}; adapter ${JSON.stringify(f.adapter)}; ${m.wallS} s in all`);
  }
  const goals = targets(measured);
  console.log(`\n${goalsText(goals, 'Firefox targets of issue 26, lavapipe')}`);
  mkdirSync(dirname(options.out), { recursive: true });
  writeFileSync(
    options.out,
    JSON.stringify(
      {
        benchmark: 'webgpu-attention: the figures of issue 26 in Firefox and Deno (npm run bench -- --firefox --deno)',
        date: new Date().toISOString(),
        timing: 'wall time of `await layer.forward(x, call)` with a Float32Array in and out (upload, dispatch, readback); 3 warm-ups, then the timed runs',
        options: { runs, warmup: 3 },
        goals,
        runtimes: measured,
      },
      null,
      2,
    ),
  );
  console.log(`\nwrote ${options.out}`);
  return measured.some((m) => !m.figures) ? 1 : 0;
}
