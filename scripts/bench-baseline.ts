// "Nothing slower than before": `npm run bench` compares each system's median with a saved baseline
// of the same runtime and adapter (bench/baselines/<runtime>-<adapter>.json, committed; or the file
// given with --baseline), and prints the comparison and a goal line. `--save-baseline` writes this
// run as the baseline of its runtime and adapter (merged into the file: presets and systems not run
// keep their earlier figures).
//
// Medians move with the machine's load, so a difference counts only beyond NOISE: slower means
// over 1 + NOISE times the baseline's median.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GoalRow } from './bench-report.ts';

/** A median within ±NOISE of the baseline's is "the same". */
export const NOISE = 0.1;

export interface Baseline {
  runtime: string;
  adapter: string;
  /** Where the figures come from: the commit measured, and how. */
  source: string;
  date: string;
  /** preset id → system id → median ms. */
  medians: Record<string, Record<string, number>>;
}

type Adapter = { vendor: string; architecture: string; device: string; description: string } | null;
/** What a comparison reads of bench.ts's reports (HeadlessReport & { id }). */
export interface Report {
  id: string;
  adapter: Adapter;
  result: { systems: { id: string; status: string; medianMs?: number }[] };
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The adapter as a file-name part: "lavapipe", "swiftshader", or the vendor and architecture. */
export function adapterSlug(adapter: Adapter): string {
  if (!adapter) return 'no-adapter';
  const text = `${adapter.vendor} ${adapter.architecture} ${adapter.device} ${adapter.description}`.toLowerCase();
  if (/llvmpipe|lavapipe/.test(text)) return 'lavapipe';
  if (/swiftshader/.test(text)) return 'swiftshader';
  return (
    `${adapter.vendor}-${adapter.architecture}`
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'unknown'
  );
}

export function defaultBaselinePath(runtime: 'node' | 'chromium', adapter: Adapter): string {
  return `${ROOT}bench/baselines/${runtime}-${adapterSlug(adapter)}.json`;
}

function readBaseline(file: string): Baseline | null {
  if (!existsSync(file)) return null;
  return JSON.parse(readFileSync(file, 'utf8')) as Baseline;
}

/** This run's medians: preset → system → ms (systems that ran correctly only). */
function mediansOf(reports: readonly Report[]): Baseline['medians'] {
  const medians: Baseline['medians'] = {};
  for (const r of reports) {
    for (const s of r.result.systems) {
      if (s.status !== 'ok' || s.medianMs === undefined) continue;
      medians[r.id] ??= {};
      medians[r.id][s.id] = Math.round(s.medianMs * 1000) / 1000;
    }
  }
  return medians;
}

/** Writes (merges) this run into the baseline file; returns the file written. */
export function saveBaseline(file: string, runtime: 'node' | 'chromium', reports: readonly Report[], source: string): string {
  const earlier = readBaseline(file);
  const medians = earlier?.medians ?? {};
  for (const [preset, systems] of Object.entries(mediansOf(reports))) medians[preset] = { ...medians[preset], ...systems };
  const baseline: Baseline = { runtime, adapter: adapterSlug(reports[0]?.adapter ?? null), source, date: new Date().toISOString(), medians };
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(baseline, null, 2)}\n`);
  return file;
}

export interface BaselineComparison {
  file: string;
  baseline: Baseline;
  rows: { preset: string; system: string; baseMs: number; nowMs: number; ratio: number; verdict: 'faster' | 'same' | 'slower' }[];
}

/** This run beside the baseline in `file`; null when there is none. */
export function compareWithBaseline(file: string, reports: readonly Report[]): BaselineComparison | null {
  const baseline = readBaseline(file);
  if (!baseline) return null;
  const rows: BaselineComparison['rows'] = [];
  for (const [preset, systems] of Object.entries(mediansOf(reports))) {
    for (const [system, nowMs] of Object.entries(systems)) {
      const baseMs = baseline.medians[preset]?.[system];
      if (baseMs === undefined) continue;
      const ratio = nowMs / baseMs;
      rows.push({ preset, system, baseMs, nowMs, ratio, verdict: ratio > 1 + NOISE ? 'slower' : ratio < 1 - NOISE ? 'faster' : 'same' });
    }
  }
  return { file, baseline, rows };
}

export function comparisonText(c: BaselineComparison): string {
  const lines = [`compared with the baseline ${relative(ROOT, c.file)} (${c.baseline.source}, ${c.baseline.date.slice(0, 10)}); ±${NOISE * 100}% counts as the same:`];
  if (c.rows.length === 0) lines.push('  (no preset and system of this run is in it)');
  const fmt = (ms: number) => (ms < 10 ? ms.toFixed(2) : ms.toFixed(1));
  for (const r of c.rows) {
    lines.push(`  ${r.preset.padEnd(12)} ${r.system.padEnd(14)} ${fmt(r.baseMs).padStart(9)} ms → ${fmt(r.nowMs).padStart(9)} ms  ×${r.ratio.toFixed(2)}  ${r.verdict}`);
  }
  return lines.join('\n');
}

/** The goal row: this engine no slower than the baseline on any preset run. */
export function baselineGoal(c: BaselineComparison | null, file: string): GoalRow {
  const goal = 'engine: nothing slower than the saved baseline (±10% noise)';
  if (!c) return { goal, figure: '', status: 'not measured', note: `no baseline at ${relative(ROOT, file)} (npm run bench -- --save-baseline writes one)` };
  const engine = c.rows.filter((r) => r.system === 'engine');
  if (engine.length === 0) return { goal, figure: '', status: 'not measured', note: 'the engine ran no preset of the baseline' };
  const slower = engine.filter((r) => r.verdict === 'slower');
  const worst = engine.reduce((a, b) => (b.ratio > a.ratio ? b : a));
  return {
    goal,
    figure: `worst ×${worst.ratio.toFixed(2)} (${worst.preset})`,
    status: slower.length === 0 ? 'met' : 'missed',
    note: slower.length ? `slower: ${slower.map((r) => r.preset).join(', ')}` : `${engine.length} preset(s) compared`,
  };
}
