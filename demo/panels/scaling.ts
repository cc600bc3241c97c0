// Scaling panel: one layer (B, E, H, causal) at a list of sequence lengths S, for this engine and the
// peers the benchmark knows. Each size is one runBenchmark call (demo/bench/runner.ts) for the systems
// still in play there, so each system's first run is gated against the float64 reference, computed
// once per size. A system that fails, runs over the time budget at a size, or is predicted to, is
// marked so at that size and skipped at every larger one. Two log-log charts (ms and GFLOP/s against
// S), a table, progress, Stop (between sizes) and a JSON download.

import { Chart, Legend, LineController, LineElement, LogarithmicScale, PointElement, Tooltip } from 'chart.js';
import type { AttentionEngine } from 'webgpu-attention';
import { type RunResult, resultsToJson, runBenchmark } from '../bench/runner.ts';
import type { BenchResult, BenchShape, BenchSystem } from '../bench/types.ts';
import { attentionFlops } from '../bench/flops.ts';
import { isSoftware } from './adapter.ts';
import { checkboxField, errorMessage, h, numberField, readInt, setState, si } from './dom.ts';
import { logTick, spacedLogTicks } from './log-ticks.ts';
import { COLOR, SHORT, WASM_SYSTEMS } from './system-names.ts';

Chart.register(LineController, LineElement, PointElement, LogarithmicScale, Legend, Tooltip);

const GPU_SEQ_LENS = [128, 256, 512, 1024, 2048, 4096, 8192];
/** On a software adapter (or the CPU backend) the default list stops here. */
const SOFTWARE_MAX_S = 2048;
const MAX_S = 8192;
const MAX_SIZES = 24;
const DEFAULT_SYSTEMS = new Set(['engine', 'tfjs']);
const SEED = 1;

type Status = 'ok' | 'over-budget' | 'failed' | 'skipped' | 'stopped' | 'pending';

interface Point {
  status: Status;
  label: string;
  medianMs?: number;
  runsMs?: number[];
  gflops?: number;
  maxAbsError?: number;
  /** Wall time of this system at this size: prepare, the gated first run, warm-ups, timed runs, dispose. */
  systemMs?: number;
  /** Why it failed, went over budget or was skipped. */
  reason?: string;
}

interface Row {
  seqLen: number;
  flops: number;
  /** Wall time of the float64 reference at this size (not run when every system was skipped). */
  referenceMs?: number;
  systems: Record<string, Point>;
}

interface Settings {
  layer: Omit<BenchShape, 'seqLen'>;
  seqLens: number[];
  warmup: number;
  runs: number;
  budgetS: number;
  systemIds: string[];
}

function fmtMs(ms: number): string {
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);
}

function fmtS(ms: number): string {
  const s = ms / 1000;
  return s >= 100 ? `${s.toFixed(0)} s` : s >= 10 ? `${s.toFixed(1)} s` : `${s.toFixed(2)} s`;
}

/** "128, 256 512;1024" → [128, 256, 512, 1024]: sorted, without repeats; throws naming a bad entry. */
export function parseSeqLens(text: string): number[] {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length) throw new Error('List at least one sequence length S.');
  const out = new Set<number>();
  for (const p of parts) {
    const v = Number(p);
    if (!Number.isInteger(v) || v < 1 || v > MAX_S) throw new Error(`Each S must be a whole number from 1 to ${MAX_S}; got "${p}".`);
    out.add(v);
  }
  if (out.size > MAX_SIZES) throw new Error(`At most ${MAX_SIZES} sizes; got ${out.size}.`);
  return [...out].sort((a, b) => a - b);
}

type XY = { x: number; y: number };
type ScaleChart = Chart<'line', XY[]>;

export function mountScalingPanel(section: HTMLElement, engine: AttentionEngine, systems: BenchSystem[]): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const software = isSoftware(engine);
  const defaultSeqLens = software ? GPU_SEQ_LENS.filter((s) => s <= SOFTWARE_MAX_S) : GPU_SEQ_LENS;

  const seqList = h('input', {
    type: 'text',
    id: 'scale-s-list',
    value: defaultSeqLens.join(', '),
    spellcheck: 'false',
    title: `sequence lengths, separated by commas or spaces (1 to ${MAX_S})`,
  });
  const b = numberField('B', 'scale-b', 1, { max: 64 });
  const e = numberField('E', 'scale-e', 512, { max: 4096 });
  const hh = numberField('H', 'scale-h', 8, { max: 64 });
  const causal = checkboxField('causal', 'scale-causal', false, 'query i sees keys j ≤ i');
  const warmup = numberField('warm-up runs', 'scale-warmup', 1, { min: 0, max: 100 });
  const runs = numberField('timed runs', 'scale-runs', 2, { min: 1, max: 1000 });
  const budget = numberField('budget per point (s)', 'scale-budget', 60, {
    max: 3600,
    title:
      'a system whose runs at one S take longer (prepare, gate, warm-ups, timed runs) is marked over budget and skipped at larger S; one predicted to take longer is skipped',
  });
  const checks = systems.map((sys) => {
    const c = checkboxField(sys.label, `scale-sys-${sys.id}`, DEFAULT_SYSTEMS.has(sys.id));
    c.input.value = sys.id;
    c.field.dataset.system = sys.id;
    return c;
  });
  const info = h('p', { class: 'muted', id: 'scale-info' });
  const note = software
    ? h(
        'p',
        { class: 'note warn', id: 'scale-software' },
        engine.backend === 'webgpu' ? 'This is a software adapter (WebGPU on the CPU): ' : 'No WebGPU here (the CPU backend): ',
        `the default list stops at S = ${SOFTWARE_MAX_S} (${GPU_SEQ_LENS[GPU_SEQ_LENS.length - 1]} on a GPU). The peers and the CPU backend are slow here, and the float64 reference that gates each size is JavaScript: at S = 8192, E = 512 it alone takes minutes.`,
      )
    : h(
        'p',
        { class: 'muted', id: 'scale-software' },
        'Each size starts with the float64 reference for the correctness gate, in JavaScript: at S = 8192, E = 512 it takes minutes on its own. The gate cannot be skipped; Stop takes effect between sizes.',
      );

  const run = h('button', { type: 'button', id: 'scale-run', class: 'primary' }, 'Run scaling');
  const stop = h('button', { type: 'button', id: 'scale-stop', disabled: true }, 'Stop');
  const download = h('button', { type: 'button', id: 'scale-download', disabled: true }, 'Download JSON');
  const progress = h('progress', { id: 'scale-progress', max: 1, value: 0 });
  const progressText = h('span', { class: 'status', id: 'scale-progress-text', 'aria-live': 'polite' }, 'Not run yet.');
  const msCanvas = h('canvas', { id: 'scale-chart-ms', role: 'img', 'aria-label': 'median ms per forward against S, log-log' });
  const gfCanvas = h('canvas', { id: 'scale-chart-gflops', role: 'img', 'aria-label': 'GFLOP/s against S, log-log' });
  const charts = h('div', { class: 'scale-charts', hidden: true }, h('div', { class: 'chart-wrap' }, msCanvas), h('div', { class: 'chart-wrap' }, gfCanvas));
  const tableWrap = h('div', { id: 'scale-results' });

  body.append(
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field seq-list', for: 'scale-s-list' }, h('span', {}, 'sequence lengths S'), seqList),
      b.field,
      e.field,
      hh.field,
      causal.field,
    ),
    h('div', { class: 'form-row' }, warmup.field, runs.field, budget.field),
    info,
    note,
    h('fieldset', { class: 'systems' }, h('legend', {}, 'Systems'), ...checks.map((c) => c.field)),
    h('div', { class: 'actions' }, run, stop, download),
    h('div', { class: 'progress-row' }, progress, progressText),
    charts,
    tableWrap,
  );
  setState(section, 'idle');

  let running = false;
  let stopRequested = false;

  const read = (): Settings => {
    const seqLens = parseSeqLens(seqList.value);
    const layer = {
      batchSize: readInt(b.input, 'B', 1, 64),
      embedDim: readInt(e.input, 'E', 1, 4096),
      numHeads: readInt(hh.input, 'H', 1, 64),
      isCausal: causal.input.checked,
    };
    if (layer.embedDim % layer.numHeads) throw new Error(`E (${layer.embedDim}) must be divisible by H (${layer.numHeads}).`);
    return {
      layer,
      seqLens,
      warmup: readInt(warmup.input, 'warm-up runs', 0, 100),
      runs: readInt(runs.input, 'timed runs', 1, 1000),
      budgetS: readInt(budget.input, 'budget per point', 1, 3600),
      systemIds: checks.filter((c) => c.input.checked).map((c) => c.input.value),
    };
  };

  const describe = () => {
    try {
      const s = read();
      const { batchSize: B, embedDim: E, numHeads: H, isCausal } = s.layer;
      const top = s.seqLens[s.seqLens.length - 1];
      const flops = attentionFlops(B, top, E, isCausal);
      const slow = s.systemIds.filter((id) => id === 'cpu' || (software && id !== 'engine' && !WASM_SYSTEMS.has(id))).map((id) => SHORT[id] ?? id);
      info.textContent =
        `${s.seqLens.length} size${s.seqLens.length === 1 ? '' : 's'}, S = ${s.seqLens.join(', ')}; Dh = ${E / H}. ` +
        `At S = ${top}: ${si(flops)}FLOP per forward, and about as many float64 operations of JavaScript for the reference.` +
        (slow.length
          ? ` ${slow.join(', ')} ${slow.length === 1 ? 'is' : 'are'} slow ${software ? 'here' : 'at large S'}: the budget skips ${slow.length === 1 ? 'it' : 'them'} when a size takes too long.`
          : '') +
        (s.systemIds.length ? '' : ' Tick at least one system.');
      info.classList.remove('error-text');
      run.disabled = running || !s.systemIds.length;
    } catch (err) {
      info.textContent = errorMessage(err);
      info.classList.add('error-text');
      run.disabled = true;
    }
  };
  for (const input of [seqList, b.input, e.input, hh.input, warmup.input, runs.input, budget.input]) input.addEventListener('input', describe);
  for (const c of [causal, ...checks]) c.input.addEventListener('change', describe);
  describe();

  let msChart: ScaleChart | null = null;
  let gfChart: ScaleChart | null = null;
  let report: Record<string, unknown> | null = null;
  let lastRun: RunResult | null = null;

  function makeChart(canvas: HTMLCanvasElement, s: Settings, yTitle: string, unit: (v: number) => string): ScaleChart {
    const lo = s.seqLens[0];
    const hi = s.seqLens[s.seqLens.length - 1];
    return new Chart(canvas, {
      type: 'line',
      data: {
        datasets: s.systemIds.map((id) => ({
          label: SHORT[id] ?? id,
          data: [] as XY[],
          borderColor: COLOR[id] ?? '#555',
          backgroundColor: COLOR[id] ?? '#555',
          borderWidth: id === 'engine' ? 2.5 : 1.8,
          pointRadius: 3,
          pointHoverRadius: 5,
        })),
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        scales: {
          x: {
            type: 'logarithmic',
            // A little room either side, and a tick at each S of the list (log axes default to 1-2-5).
            min: lo / 1.25,
            max: hi * 1.25,
            afterBuildTicks: (axis) => {
              axis.ticks = s.seqLens.map((v) => ({ value: v }));
            },
            ticks: { autoSkip: true, maxRotation: 0, callback: (v) => String(v) },
            title: { display: true, text: 'sequence length S (log)' },
          },
          y: {
            type: 'logarithmic',
            // Grid lines only where there is a label (a log axis otherwise draws every minor tick), spaced for the chart's height.
            afterBuildTicks: (axis) => {
              const labelled = axis.ticks.filter((t, i) => logTick(t.value, i, axis.ticks) !== '');
              if (labelled.length >= 2) axis.ticks = spacedLogTicks(labelled, axis);
            },
            ticks: { callback: logTick },
            title: { display: true, text: yTitle },
          },
        },
        plugins: {
          legend: { position: 'top', align: 'end', labels: { boxWidth: 10, boxHeight: 10 } },
          tooltip: {
            callbacks: {
              title: (items) => `S = ${items[0]?.parsed.x}`,
              label: (c) => `${c.dataset.label}: ${unit(c.parsed.y ?? 0)}`,
            },
          },
        },
      },
    });
  }

  function paintCharts(s: Settings, rows: Row[]): void {
    for (const [c, key] of [
      [msChart, 'medianMs'],
      [gfChart, 'gflops'],
    ] as const) {
      if (!c) continue;
      s.systemIds.forEach((id, i) => {
        const ds = c.data.datasets[i];
        ds.data = rows
          .filter((r) => (r.systems[id]?.status === 'ok' || r.systems[id]?.status === 'over-budget') && r.systems[id][key] !== undefined)
          .map((r) => ({ x: r.seqLen, y: r.systems[id][key]! }));
        const end = rows.find((r) => ['failed', 'over-budget', 'skipped'].includes(r.systems[id]?.status ?? ''));
        const what = end && { failed: 'failed', 'over-budget': 'over budget', skipped: 'skipped' }[end.systems[id].status as 'failed' | 'over-budget' | 'skipped'];
        ds.label = `${SHORT[id] ?? id}${end ? ` (${what} at S = ${end.seqLen})` : ''}`;
      });
      c.update('none');
    }
  }

  function resultsTable(s: Settings, rows: Row[]): HTMLElement {
    const labelOf = (id: string) => rows.find((r) => r.systems[id])?.systems[id].label ?? systems.find((x) => x.id === id)?.label ?? id;
    const cells = (S: number, id: string, p: Point | undefined): HTMLElement[] => {
      const data = { 'data-s': S, 'data-system': id, 'data-status': p?.status ?? 'pending' };
      if (p && (p.status === 'ok' || p.status === 'over-budget')) {
        const over = p.status === 'over-budget';
        const title = `${p.label} at S = ${S}: runs ${p.runsMs!.map(fmtMs).join(', ')} ms; max |err| vs reference ${p.maxAbsError?.toExponential(1)}; ${fmtS(p.systemMs ?? 0)} in all${over ? ` (over the ${s.budgetS} s budget)` : ''}`;
        return [
          h('td', { class: `num${over ? ' over' : ''}`, ...data, 'data-metric': 'ms', title }, fmtMs(p.medianMs!)),
          h('td', { class: `num${over ? ' over' : ''}`, ...data, 'data-metric': 'gflops', title }, p.gflops!.toPrecision(3)),
        ];
      }
      const status = p?.status ?? 'pending';
      const badge = { failed: 'fail', skipped: 'skip', stopped: 'skip', pending: 'skip' }[status as 'failed' | 'skipped' | 'stopped' | 'pending'];
      return [
        h(
          'td',
          { class: 'state-cell', colspan: 2, ...data, title: p?.reason ?? null },
          status === 'pending' ? h('span', { class: 'muted' }, '…') : h('span', { class: `badge ${badge}` }, status),
        ),
      ];
    };
    const table = h(
      'table',
      { class: 'grid results scaling', id: 'scale-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', { class: 'num', rowspan: 2 }, 'S'),
          h('th', { class: 'num', rowspan: 2, title: 'per forward, attentionFlops(B, S, E, causal): 8·B·S·E² + 4·B·S²·E (half the S² term when causal)' }, 'FLOP'),
          h('th', { class: 'num', rowspan: 2, title: 'wall time of the float64 CPU reference (the correctness gate) at this S' }, 'reference'),
          ...s.systemIds.map((id) =>
            h('th', { class: 'sys', colspan: 2, title: labelOf(id) }, h('span', { class: 'swatch', style: `background:${COLOR[id] ?? '#555'}` }), SHORT[id] ?? id),
          ),
        ),
        h('tr', {}, ...s.systemIds.flatMap(() => [h('th', { class: 'num', title: 'median ms per forward' }, 'ms'), h('th', { class: 'num' }, 'GFLOP/s')])),
      ),
      h(
        'tbody',
        {},
        ...rows.map((r) =>
          h(
            'tr',
            { 'data-s': r.seqLen },
            h('td', { class: 'num' }, String(r.seqLen)),
            h('td', { class: 'num' }, si(r.flops)),
            h('td', { class: 'num muted' }, r.referenceMs !== undefined ? fmtS(r.referenceMs) : '—'),
            ...s.systemIds.flatMap((id) => cells(r.seqLen, id, r.systems[id])),
          ),
        ),
      ),
    );
    // Every failure, budget overrun and skip, in words: the first one per system (the rest follow from it).
    const notes: HTMLElement[] = [];
    for (const id of s.systemIds) {
      const first = rows.find((r) => ['failed', 'over-budget', 'skipped'].includes(r.systems[id]?.status ?? ''));
      if (!first) continue;
      const p = first.systems[id];
      const after = first.seqLen < s.seqLens[s.seqLens.length - 1] ? ' Larger S skipped.' : '';
      notes.push(
        h(
          'li',
          { 'data-system': id, class: p.status === 'failed' ? 'error-text' : '' },
          h('strong', {}, `${SHORT[id] ?? id}, S = ${first.seqLen}: `),
          `${p.status === 'over-budget' ? 'over budget (shaded)' : p.status}: ${p.reason ?? ''}${after}`,
        ),
      );
    }
    const stopped = rows.some((r) => Object.values(r.systems).some((p) => p.status === 'stopped'));
    if (stopped) notes.push(h('li', {}, h('strong', {}, 'Stopped: '), 'the sizes after the Stop were not run.'));
    const { batchSize: B, embedDim: E, numHeads: H, isCausal } = s.layer;
    return h(
      'div',
      {},
      h(
        'p',
        { class: 'muted' },
        `B=${B} E=${E} H=${H}${isCausal ? ' causal' : ''} · ${s.warmup} warm-up, ${s.runs} timed run${s.runs === 1 ? '' : 's'} per point, median ms per forward · seed ${SEED} · budget ${s.budgetS} s per point · hover a cell for its runs`,
      ),
      h('div', { class: 'table-scroll' }, table),
      notes.length ? h('ul', { class: 'scale-notes', id: 'scale-notes' }, ...notes) : null,
    );
  }

  async function scale(): Promise<void> {
    let s: Settings;
    try {
      s = read();
    } catch (err) {
      progressText.textContent = errorMessage(err);
      return;
    }
    if (!s.systemIds.length) {
      progressText.textContent = 'Tick at least one system.';
      return;
    }
    running = true;
    stopRequested = false;
    run.disabled = true;
    stop.disabled = false;
    download.disabled = true;
    setState(section, 'running');
    progress.value = 0;
    report = null;
    lastRun = null;

    const { layer } = s;
    const budgetMs = s.budgetS * 1000;
    const rows: Row[] = s.seqLens.map((S) => ({ seqLen: S, flops: attentionFlops(layer.batchSize, S, layer.embedDim, layer.isCausal), systems: {} }));
    /** Per system: why it no longer runs, and its last good point (for the prediction). */
    const ended = new Map<string, string>();
    const lastOk = new Map<string, { seqLen: number; flops: number; medianMs: number }>();
    let lastRef: { flops: number; ms: number } | null = null;
    const started = performance.now();

    msChart?.destroy();
    gfChart?.destroy();
    charts.hidden = false;
    msChart = makeChart(msCanvas, s, 'median ms per forward (log)', (v) => `${fmtMs(v)} ms`);
    gfChart = makeChart(gfCanvas, s, 'GFLOP/s (log)', (v) => `${v.toPrecision(3)} GFLOP/s`);
    const render = () => {
      tableWrap.replaceChildren(resultsTable(s, rows));
      paintCharts(s, rows);
    };
    render();

    let stoppedAt: number | null = null;
    try {
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i];
        const S = row.seqLen;
        if (stopRequested) {
          stoppedAt = i;
          for (const r of rows.slice(i))
            for (const id of s.systemIds) r.systems[id] = { status: 'stopped', label: systems.find((x) => x.id === id)?.label ?? id, reason: 'stopped before this size' };
          break;
        }
        const active: string[] = [];
        for (const id of s.systemIds) {
          const label = rows[i - 1]?.systems[id]?.label ?? systems.find((x) => x.id === id)?.label ?? id;
          const why = ended.get(id);
          if (why) {
            row.systems[id] = { status: 'skipped', label, reason: why };
            continue;
          }
          // Per run, time grows with the FLOPs; the gate's run, the warm-ups and the timed runs make 1 + warmup + runs.
          const prev = lastOk.get(id);
          const predicted = prev ? prev.medianMs * (row.flops / prev.flops) * (1 + s.warmup + s.runs) : 0;
          if (predicted > budgetMs) {
            const reason = `predicted ≈ ${fmtS(predicted)} for its ${1 + s.warmup + s.runs} runs (${fmtMs(prev!.medianMs)} ms at S = ${prev!.seqLen}, scaled by FLOPs), over the ${s.budgetS} s budget.`;
            row.systems[id] = { status: 'skipped', label, reason };
            ended.set(id, `skipped from S = ${S}: ${reason}`);
            continue;
          }
          row.systems[id] = { status: 'pending', label };
          active.push(id);
        }
        render();
        if (!active.length) continue;

        const shape: BenchShape = { ...layer, seqLen: S };
        const t0 = performance.now();
        const startOf = new Map<string, number>();
        const endOf = new Map<string, number>();
        const refEstimate = lastRef ? ` (≈ ${fmtS(lastRef.ms * (row.flops / lastRef.flops))} from the last size)` : '';
        let refMs: number | undefined;
        try {
          const result = await runBenchmark(shape, systems, {
            warmup: s.warmup,
            runs: s.runs,
            seed: SEED,
            systemIds: active,
            onProgress: (p) => {
              const now = performance.now();
              if (p.system !== 'reference') {
                refMs ??= now - t0;
                if (!startOf.has(p.system)) startOf.set(p.system, now);
                if (p.phase === 'done') endOf.set(p.system, now);
              }
              progress.value = (i + p.fraction) / rows.length;
              progressText.textContent =
                `S = ${S} (${i + 1} of ${rows.length}) · ${p.message}${p.system === 'reference' && p.fraction === 0 ? refEstimate : ''}` +
                (stopRequested ? ' · stopping after this size…' : '');
            },
          });
          lastRun = result;
          row.referenceMs = refMs;
          if (refMs !== undefined) lastRef = { flops: row.flops, ms: refMs };
          for (const r of result.systems) {
            const systemMs = (endOf.get(r.id) ?? performance.now()) - (startOf.get(r.id) ?? t0);
            const p: Point = { status: 'ok', label: r.label, systemMs };
            if (r.status === 'ok') {
              Object.assign(p, { medianMs: r.medianMs, runsMs: r.runsMs, gflops: r.gflops, maxAbsError: r.maxAbsError });
              if (systemMs > budgetMs) {
                p.status = 'over-budget';
                p.reason = `its runs here took ${fmtS(systemMs)} in all, over the ${s.budgetS} s budget.`;
                ended.set(r.id, `skipped after S = ${S}, where it went over the ${s.budgetS} s budget (${fmtS(systemMs)}).`);
              } else {
                lastOk.set(r.id, { seqLen: S, flops: row.flops, medianMs: r.medianMs! });
              }
            } else {
              p.status = 'failed';
              p.maxAbsError = r.maxAbsError;
              p.reason = r.error ?? 'failed';
              ended.set(r.id, `skipped after it failed at S = ${S}: ${p.reason}`);
            }
            row.systems[r.id] = p;
          }
        } catch (err) {
          // The benchmark itself stopped (the reference ran out of memory, say): every system of this size failed.
          for (const id of active) {
            row.systems[id] = { status: 'failed', label: row.systems[id].label, reason: `the benchmark stopped: ${errorMessage(err)}` };
            ended.set(id, `skipped after the benchmark stopped at S = ${S}.`);
          }
        }
        progress.value = (i + 1) / rows.length;
        render();
      }
      render();
      if (stoppedAt === null) progress.value = 1;
      const points = rows.flatMap((r) => Object.values(r.systems));
      const count = (st: Status) => points.filter((p) => p.status === st).length;
      const tally = `${count('ok')} ok, ${count('over-budget')} over budget, ${count('failed')} failed, ${count('skipped')} skipped`;
      const took = fmtS(performance.now() - started);
      progressText.textContent =
        stoppedAt !== null
          ? `Stopped after S = ${rows[stoppedAt - 1]?.seqLen ?? '—'} (${stoppedAt} of ${rows.length} sizes, ${took}): ${tally}.`
          : `Done: ${rows.length} size${rows.length === 1 ? '' : 's'} × ${s.systemIds.length} system${s.systemIds.length === 1 ? '' : 's'} in ${took}: ${tally}.`;
      report = {
        benchmark: 'webgpu-attention scaling: multi-head self-attention forward against the sequence length S',
        layer,
        seqLens: s.seqLens,
        systemIds: s.systemIds,
        warmup: s.warmup,
        runs: s.runs,
        seed: SEED,
        budgetSeconds: s.budgetS,
        stopped: stoppedAt !== null,
        gate: lastRun ? { tolerance: 'engineTolerance(shape) at each S; ×peerToleranceFactor for peers', peerToleranceFactor: lastRun.peerToleranceFactor } : null,
        points: rows,
      };
      download.disabled = false;
      setState(section, 'done');
    } catch (err) {
      progressText.textContent = `The scaling run stopped: ${errorMessage(err)}`;
      setState(section, 'error');
    } finally {
      running = false;
      stop.disabled = true;
      describe();
    }
  }

  run.addEventListener('click', () => void scale());
  stop.addEventListener('click', () => {
    stopRequested = true;
    stop.disabled = true;
    progressText.textContent = `${progressText.textContent} · stopping after this size…`;
  });

  download.addEventListener('click', () => {
    if (!report) return;
    // resultsToJson adds where and when (date, user agent, backend, adapter, versions) and then spreads
    // the object it is given, so the scaling report passes through it whole.
    const json = resultsToJson(report as unknown as BenchResult, { adapter: engine.adapterInfo, backend: engine.backend, fallbackReason: engine.fallbackReason });
    const l = report.layer as Settings['layer'];
    const a = h('a', {
      href: URL.createObjectURL(new Blob([json], { type: 'application/json' })),
      download: `webgpu-attention-scaling-B${l.batchSize}-E${l.embedDim}-H${l.numHeads}${l.isCausal ? '-causal' : ''}.json`,
    });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  });
}
