// How `npm run bench` prints a run: a table per shape, with long notes as numbered footnotes under it
// (no cell is wider than CELL), and the project's performance goals, met or missed. Pure functions of
// the reports, so a saved run (bench-results/*.json, `shapes`) prints the same way as a live one.

import type { HeadlessReport } from '../demo/bench/headless.ts';
import type { BenchShape, SystemResult } from '../demo/bench/types.ts';

/** The widest a table cell gets; a longer note becomes a footnote, a longer label is cut (in full in its footnote). */
export const CELL = 40;
/** Footnotes and goals wrap at this many columns. */
const WIDTH = 100;

export const describeShape = (s: BenchShape) =>
  `B=${s.batchSize} S=${s.seqLen} E=${s.embedDim} H=${s.numHeads}${s.isCausal ? ' causal' : ''}${s.cacheLen ? ` over a KV cache of ${s.cacheLen}` : ''}`;

/** Bytes in MB (10⁶ bytes, the unit of the memory goal's "< 200 MB"), one decimal. */
export const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
const bytesText = (bytes: number) => (bytes >= 1e6 ? `${mb(bytes)} MB` : `${(bytes / 1e3).toFixed(1)} kB`);

/** `text` in lines of at most `width` columns (a longer word stays whole), the first after `first`, the rest after `rest`. */
export function wrap(text: string, first: string, rest: string, width = WIDTH): string[] {
  const lines: string[] = [];
  let line = first;
  for (const word of text.split(' ')) {
    const start = line === first || line === rest;
    if (!start && line.length + 1 + word.length > width) {
      lines.push(line);
      line = rest + word;
    } else line += start ? word : ` ${word}`;
  }
  lines.push(line);
  return lines;
}

/** What the table says about a system beyond its figures: kernel times, variants and memory, or why it failed. */
function notes(s: SystemResult): string[] {
  if (s.status !== 'ok') return [`failed: ${(s.error ?? '').split('\n')[0].slice(0, 300)}`];
  return [
    s.kernelMs
      ? `GPU kernels: ${Object.entries(s.kernelMs)
          .map(([k, v]) => `${k} ${v.toFixed(1)}`)
          .join(', ')} ms`
      : '',
    s.kernelVariants?.length ? `variants: ${s.kernelVariants.map((v) => `${v.kernel} ${v.variant} (${v.source})`).join(', ')}` : '',
    s.gpuMemory
      ? `GPU peak ${bytesText(s.gpuMemory.peakBytes)} (weights ${bytesText(s.gpuMemory.weightBytes)} + scratch ${bytesText(s.gpuMemory.scratchPeakBytes)})`
      : '',
  ].filter(Boolean);
}

/** One shape's table, then its footnotes: [n] in the note column stands for notes too long for a cell. */
export function table(report: HeadlessReport): string {
  const footnotes: string[] = [];
  let n = 0;
  const rows = report.result.systems.map((s) => {
    const label = s.label.length <= CELL ? s.label : `${s.label.slice(0, CELL - 1)}…`;
    const said = notes(s);
    let note = said.join('; ');
    if (note.length > CELL || label !== s.label) {
      note = `[${++n}]`;
      footnotes.push(`${note} ${s.label}`, ...said.flatMap((text) => wrap(text, '    ', '      ')));
    }
    return [
      label,
      s.status === 'ok' ? (s.medianMs ?? 0).toFixed((s.medianMs ?? 0) < 10 ? 2 : 1) : 'failed',
      s.gflops !== undefined ? s.gflops.toFixed(2) : '',
      s.ratioToEngine !== undefined ? `${s.ratioToEngine.toFixed(2)}x` : '',
      s.maxAbsError !== undefined ? s.maxAbsError.toExponential(1) : '',
      note,
    ];
  });
  const header = ['system', 'median ms', 'GFLOP/s', 'vs engine', 'max err', 'note'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const fmt = (r: string[]) =>
    r
      .map((c, i) => (i === 0 || i === 5 ? c.padEnd(widths[i]) : c.padStart(widths[i])))
      .join('  ')
      .trimEnd();
  const lines = [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt)];
  const notRun = (report.result.notRun ?? []).map((s) => `not run: ${s.label} (${s.reason})`);
  return [...lines, ...(footnotes.length ? ['', ...footnotes] : []), ...(notRun.length ? ['', ...notRun] : [])].join('\n');
}

// The performance goals of this project, for the shapes a run measured. Peer ratios are (peer median) /
// (engine median) from the same run on the same adapter; the causal ratios compare the engine on the
// twin presets long (non-causal) and long-causal; the memory row reads the engine's peak GPU memory.
export interface GoalRow {
  goal: string;
  figure: string;
  status: 'met' | 'missed' | 'not measured';
  /** Why a row is not measured (or what failed). */
  note?: string;
}
export function goalTable(reports: HeadlessReport[]): GoalRow[] {
  const find = (s: number, e: number, h: number, causal = false) =>
    reports.find(
      (r) =>
        r.result.shape.seqLen === s &&
        r.result.shape.embedDim === e &&
        r.result.shape.numHeads === h &&
        r.result.shape.batchSize === 1 &&
        r.result.shape.isCausal === causal,
    );
  const engineOf = (r: ReturnType<typeof find>) => r?.result.systems.find((x) => x.id === 'engine');
  const rows: GoalRow[] = [];
  const ratio = (report: ReturnType<typeof find>, peer: string, want: number, goal: string) => {
    const p = report?.result.systems.find((x) => x.id === peer);
    if (!report || !p || p.status !== 'ok' || p.ratioToEngine === undefined) {
      rows.push({ goal, figure: p?.status === 'failed' ? `${peer} failed` : '', status: 'not measured' });
    } else {
      rows.push({ goal, figure: `${p.ratioToEngine.toFixed(2)}×`, status: p.ratioToEngine >= want ? 'met' : 'missed' });
    }
  };
  const s512 = find(512, 512, 8);
  ratio(s512, 'tfjs', 3, 'B=1 S=512 E=512 H=8: ≥ 3× faster than TensorFlow.js');
  ratio(s512, 'ort', 1.5, 'B=1 S=512 E=512 H=8: ≥ 1.5× faster than ONNX Runtime Web');
  ratio(s512, 'naive', 5, 'B=1 S=512 E=512 H=8: ≥ 5× faster than the naive per-head loop');
  ratio(find(128, 256, 4), 'tfjs', 3, 'B=1 S=128 E=256 H=4: ≥ 3× faster than TensorFlow.js');

  // The CPU goals (issue 14): this engine's 'wasm' backend against ONNX Runtime Web's WASM EP (both
  // 1 thread), against itself on more threads, and against the float64 'cpu' backend. Figures are
  // ratios of medians from the same run.
  const s128 = find(128, 256, 4);
  wasmGoal(rows, s512, 'wasm', 'ort-wasm', "B=1 S=512 E=512 H=8: 'wasm' 1 thread ≤ 1.25× the time of ONNX Runtime Web WASM EP 1 thread", (r) => r <= 1.25);
  wasmGoal(rows, s128, 'wasm', 'ort-wasm', "B=1 S=128 E=256 H=4: 'wasm' 1 thread ≤ 1.25× the time of ONNX Runtime Web WASM EP 1 thread", (r) => r <= 1.25);
  wasmGoal(rows, s512, 'wasm', 'wasm-threads', "B=1 S=512 E=512 H=8: 'wasm' on its default threads ≥ 1.6× faster than on 1 thread", (r) => r >= 1.6);
  wasmGoal(rows, s512, 'cpu', 'wasm', "B=1 S=512 E=512 H=8: 'wasm' 1 thread ≥ 10× faster than the float64 'cpu' backend", (r) => r >= 10);

  // Causal against non-causal at S=2048: the attention kernel alone (timestamp queries) and end to end.
  const full = find(2048, 512, 8, false);
  const causal = find(2048, 512, 8, true);
  type Measured = { engine: SystemResult; report: HeadlessReport };
  const pair = (want: number, goal: string, get: (m: Measured) => number | string) => {
    const missing = [!full && 'long', !causal && 'long-causal'].filter(Boolean);
    if (!full || !causal)
      return rows.push({ goal, figure: '', status: 'not measured', note: `needs both presets long and long-causal in one run; missing: ${missing.join(', ')}` });
    const measured: Measured[] = [];
    const problems: string[] = [];
    for (const report of [full, causal]) {
      const engine = engineOf(report);
      if (engine?.status === 'ok') measured.push({ engine, report });
      else
        problems.push(
          `engine ${engine ? 'failed' : 'not run'} at ${describeShape(report.result.shape)}${engine?.error ? `: ${engine.error.split('\n')[0].slice(0, 80)}` : ''}`,
        );
    }
    if (problems.length) return rows.push({ goal, figure: '', status: 'not measured', note: problems.join('; ') });
    const [a, b] = measured.map(get);
    if (typeof a === 'string' || typeof b === 'string') return rows.push({ goal, figure: '', status: 'not measured', note: typeof a === 'string' ? a : String(b) });
    const r = a / b;
    return rows.push({ goal, figure: `${r.toFixed(2)}×`, status: r >= want ? 'met' : 'missed', note: `${a.toFixed(1)} ms non-causal / ${b.toFixed(1)} ms causal` });
  };
  pair(1.7, 'B=1 S=2048 E=512 H=8, causal: attention kernel alone ≥ 1.7× faster than non-causal', ({ engine: e, report }) => {
    const ms = e.kernelMs?.flash_attention;
    if (ms !== undefined) return ms;
    if (!report.features.includes('timestamp-query')) return "the adapter lacks 'timestamp-query', so there are no kernel timings";
    return e.kernelMs
      ? `no flash_attention in the kernel timings (${Object.keys(e.kernelMs).join(', ')})`
      : "no kernel timings from the engine's profiled run (createAttentionEngine({ profile: true }) failed or gave none)";
  });
  pair(1.35, 'B=1 S=2048 E=512 H=8, causal: end to end ≥ 1.35× faster than non-causal', ({ engine: e }) => e.medianMs!);

  // S=8192 runs, and the engine's peak GPU memory over its runs (weights + one call's scratch) stays under 200 MB.
  const memGoal = 'B=1 S=8192 E=512 H=8 runs, engine peak GPU memory < 200 MB';
  const s8192 = find(8192, 512, 8);
  const e8192 = engineOf(s8192);
  if (!s8192 || !e8192) {
    rows.push({
      goal: memGoal,
      figure: '',
      status: 'not measured',
      note: s8192 ? 'the engine was not among the systems run' : 'not in this run (preset s8192-e512)',
    });
  } else if (s8192.backend !== 'webgpu') {
    rows.push({ goal: memGoal, figure: '', status: 'not measured', note: `no WebGPU: ${s8192.fallbackReason ?? 'CPU backend'}` });
  } else if (e8192.status !== 'ok') {
    rows.push({ goal: memGoal, figure: 'failed', status: 'missed', note: (e8192.error ?? '').split('\n')[0].slice(0, 120) });
  } else if (!e8192.gpuMemory) {
    rows.push({ goal: memGoal, figure: '', status: 'not measured', note: 'the engine system reported no GPU memory' });
  } else {
    const m = e8192.gpuMemory;
    rows.push({
      goal: memGoal,
      figure: `${mb(m.peakBytes)} MB`,
      status: m.peakBytes < 200e6 ? 'met' : 'missed',
      note: `weights ${mb(m.weightBytes)} MB + scratch ${mb(m.scratchPeakBytes)} MB; median ${e8192.medianMs!.toFixed(0)} ms`,
    });
  }
  return rows;
}

/**
 * One goal between two systems of one shape: the figure is median(a) / median(b) (a time ratio, or b's
 * speed-up over a), `ok` says whether it is met; the note gives both medians and thread counts.
 */
function wasmGoal(rows: GoalRow[], report: HeadlessReport | undefined, a: string, b: string, goal: string, ok: (ratio: number) => boolean): void {
  const [sa, sb] = [a, b].map((id) => report?.result.systems.find((x) => x.id === id));
  const missing = [sa, sb].flatMap((s, i) => (!s ? [`${[a, b][i]} not run`] : s.status !== 'ok' ? [`${s.id} failed`] : []));
  if (!report || missing.length) {
    rows.push({ goal, figure: '', status: 'not measured', note: report ? missing.join(', ') : `shape ${goal.split(':')[0]} not in this run` });
    return;
  }
  const r = sa!.medianMs! / sb!.medianMs!;
  const threads = [sa!, sb!].map((s) => `${s.id} ${s.medianMs!.toFixed(1)} ms${s.threads !== undefined ? ` on ${s.threads} thread${s.threads === 1 ? '' : 's'}` : ''}`);
  rows.push({ goal, figure: `${r.toFixed(2)}×`, status: ok(r) ? 'met' : 'missed', note: threads.join(', ') });
}

/** The goals, met, missed or not measured, each with its figure and, on the lines below, its note. */
export function goalsText(goals: GoalRow[], where: string): string {
  const figure = Math.max(8, ...goals.map((g) => g.figure.length));
  const indent = ' '.repeat(2 + 12 + 1 + figure + 2);
  const lines = [`performance goals of this project (${where}):`];
  for (const g of goals) {
    lines.push(...wrap(g.goal, `  ${g.status.padEnd(12)} ${g.figure.padStart(figure)}  `, indent));
    if (g.note) lines.push(...wrap(`(${g.note})`, indent, indent));
  }
  return lines.join('\n');
}
