// Benchmark panel: a shape (preset or custom), warm-up and run counts, which systems, Run; a progress
// bar, a results table, a bar chart of the medians and a JSON download.

import { BarController, BarElement, CategoryScale, Chart, LinearScale, LogarithmicScale, Tooltip } from 'chart.js';
import type { AttentionEngine } from 'webgpu-attention';
import { PRESETS } from '../bench/presets.ts';
import { type RunResult, resultsToJson, runBenchmark } from '../bench/runner.ts';
import type { BenchShape, BenchSystem, SystemResult } from '../bench/types.ts';
import { attentionFlops } from '../bench/flops.ts';
import { checkboxField, errorMessage, h, numberField, readInt, setState, si } from './dom.ts';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, LogarithmicScale, Tooltip);

/**
 * Systems left unticked at first: TensorFlow.js's WASM backend is the slowest of the CPU systems (several
 * times the others' time) and one more WebAssembly download; tick it to compare.
 */
const UNCHECKED_BY_DEFAULT = new Set(['tfjs-wasm']);

function fmtBytes(bytes: number): string {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

function fmtMs(ms: number): string {
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);
}

export function mountBenchmarkPanel(section: HTMLElement, engine: AttentionEngine, systems: BenchSystem[]): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const preset = h(
    'select',
    { id: 'bench-preset' },
    ...PRESETS.map((p) => h('option', { value: p.id }, p.label)),
    h('option', { value: 'custom' }, 'custom (edit below)'),
  );
  const b = numberField('B', 'bench-b', 1, { max: 64 });
  const s = numberField('S', 'bench-s', 16, { max: 8192 });
  const e = numberField('E', 'bench-e', 32, { max: 4096 });
  const hh = numberField('H', 'bench-h', 2, { max: 64 });
  const causal = checkboxField('causal', 'bench-causal', false);
  const warmup = numberField('warm-up runs', 'bench-warmup', 2, { min: 0, max: 100 });
  const runs = numberField('timed runs', 'bench-runs', 5, { min: 1, max: 1000 });
  const seed = numberField('seed', 'bench-seed', 1, { min: 0 });
  const shapeInfo = h('p', { class: 'muted', id: 'bench-shape-info' });

  const checks = systems.map((sys) => {
    const c = checkboxField(sys.label, `bench-sys-${sys.id}`, !UNCHECKED_BY_DEFAULT.has(sys.id));
    c.input.value = sys.id;
    c.field.dataset.system = sys.id;
    return c;
  });
  const run = h('button', { type: 'button', id: 'bench-run', class: 'primary' }, 'Run benchmark');
  const download = h('button', { type: 'button', id: 'bench-download', disabled: true }, 'Download JSON');
  const progress = h('progress', { id: 'bench-progress', max: 1, value: 0 });
  const progressText = h('span', { class: 'status', id: 'bench-progress-text', 'aria-live': 'polite' }, 'Not run yet.');
  const tableWrap = h('div', { id: 'bench-results' });
  const chartCanvas = h('canvas', { id: 'bench-chart', role: 'img', 'aria-label': 'median time per system' });
  const chartWrap = h('div', { class: 'chart-wrap', hidden: true }, chartCanvas);

  body.append(
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field', for: 'bench-preset' }, h('span', {}, 'shape'), preset),
      b.field,
      s.field,
      e.field,
      hh.field,
      causal.field,
    ),
    h('div', { class: 'form-row' }, warmup.field, runs.field, seed.field),
    shapeInfo,
    h('fieldset', { class: 'systems' }, h('legend', {}, 'Systems'), ...checks.map((c) => c.field)),
    h('div', { class: 'actions' }, run, download),
    h('div', { class: 'progress-row' }, progress, progressText),
    tableWrap,
    chartWrap,
  );
  setState(section, 'idle');

  const shapeInputs = [b.input, s.input, e.input, hh.input];
  const readShape = (): BenchShape => {
    const shape = {
      batchSize: readInt(b.input, 'B', 1, 64),
      seqLen: readInt(s.input, 'S', 1, 8192),
      embedDim: readInt(e.input, 'E', 1, 4096),
      numHeads: readInt(hh.input, 'H', 1, 64),
      isCausal: causal.input.checked,
    };
    // A decode preset's KV cache (the fields have none: editing them makes the shape custom).
    const cacheLen = PRESETS.find((x) => x.id === preset.value)?.cacheLen;
    if (shape.embedDim % shape.numHeads) throw new Error(`E (${shape.embedDim}) must be divisible by H (${shape.numHeads}).`);
    return cacheLen ? { ...shape, cacheLen } : shape;
  };
  const describe = () => {
    try {
      const sh = readShape();
      const flops = attentionFlops(sh.batchSize, sh.seqLen, sh.embedDim, sh.isCausal, sh.cacheLen);
      const slow = sh.batchSize * sh.seqLen * sh.embedDim * (sh.embedDim + sh.seqLen) > 2e8;
      const decode = sh.cacheLen ? ` A decode step over a KV cache of ${sh.cacheLen} positions: only this engine's backends run it (the peers take no cache).` : '';
      shapeInfo.textContent =
        `${si(flops)}FLOP per forward; Dh = ${sh.embedDim / sh.numHeads}.${decode} Each system's first run is checked against the float64 CPU reference before it is timed.` +
        (slow ? ' This shape is large: the JavaScript reference (and the CPU system) take seconds to minutes here.' : '');
      shapeInfo.classList.remove('error-text');
      run.disabled = false;
    } catch (err) {
      shapeInfo.textContent = errorMessage(err);
      shapeInfo.classList.add('error-text');
      run.disabled = true;
    }
  };
  const applyPreset = () => {
    const p = PRESETS.find((x) => x.id === preset.value);
    if (!p) return;
    b.input.value = String(p.batchSize);
    s.input.value = String(p.seqLen);
    e.input.value = String(p.embedDim);
    hh.input.value = String(p.numHeads);
    causal.input.checked = p.isCausal;
    describe();
  };
  const onShapeEdit = () => {
    try {
      const sh = readShape();
      // The shape fields have no KV cache, so an edited shape is never a decode preset.
      const match = PRESETS.find(
        (p) =>
          !p.cacheLen && p.batchSize === sh.batchSize && p.seqLen === sh.seqLen && p.embedDim === sh.embedDim && p.numHeads === sh.numHeads && p.isCausal === sh.isCausal,
      );
      preset.value = match ? match.id : 'custom';
    } catch {
      preset.value = 'custom';
    }
    describe();
  };
  preset.addEventListener('change', applyPreset);
  for (const i of shapeInputs) i.addEventListener('input', onShapeEdit);
  causal.input.addEventListener('change', onShapeEdit);
  applyPreset();

  let chart: Chart | null = null;
  let last: RunResult | null = null;
  /** Characters per line of the chart's labels, for its width now; redrawn when a resize changes it. */
  let labelWidth = 0;
  new ResizeObserver(() => {
    if (chart && last && (chartWrap.clientWidth < 520 ? 18 : 28) !== labelWidth) drawChart(last);
  }).observe(chartWrap);

  /** A label as lines of at most `width` characters, broken at spaces (a longer word keeps its own line). */
  function wrapLabel(text: string, width: number): string[] {
    const lines: string[] = [];
    for (const word of text.split(' ')) {
      const lastLine = lines[lines.length - 1];
      if (lastLine !== undefined && lastLine.length + 1 + word.length <= width) lines[lines.length - 1] = `${lastLine} ${word}`;
      else lines.push(word);
    }
    return lines;
  }

  function resultsTable(result: RunResult): HTMLElement {
    const cell = (v: string, cls = 'num') => h('td', { class: cls }, v);
    const row = (r: SystemResult) =>
      h(
        'tr',
        { 'data-system': r.id, 'data-status': r.status, class: r.status === 'ok' ? '' : 'failed' },
        h('td', {}, r.label),
        h('td', {}, h('span', { class: `badge ${r.status === 'ok' ? 'pass' : 'fail'}` }, r.status === 'ok' ? 'ok' : 'failed')),
        cell(r.medianMs !== undefined ? fmtMs(r.medianMs) : '—'),
        cell(r.gflops !== undefined ? r.gflops.toPrecision(3) : '—'),
        cell(r.ratioToEngine !== undefined ? `${r.ratioToEngine.toPrecision(3)}×` : '—'),
        cell(r.maxAbsError !== undefined ? r.maxAbsError.toExponential(1) : '—'),
        h(
          'td',
          { class: r.status === 'ok' ? 'note-cell muted' : 'note-cell error-text' },
          r.status === 'ok'
            ? `runs: ${r.runsMs!.map(fmtMs).join(', ')} ms` +
                (r.threads !== undefined ? ` · ${r.threads} thread${r.threads === 1 ? '' : 's'}` : '') +
                (r.gpuMemory
                  ? ` · GPU peak ${fmtBytes(r.gpuMemory.peakBytes)} (weights ${fmtBytes(r.gpuMemory.weightBytes)} + scratch ${fmtBytes(r.gpuMemory.scratchPeakBytes)})`
                  : '') +
                (r.kernelVariants?.length
                  ? ` · kernels: ${r.kernelVariants.map((v) => `${v.kernel} ${v.variant}`).join(', ')} (${r.kernelVariants[0].source === 'store' ? 'tuned earlier' : 'tuned now'})`
                  : '')
            : (r.error ?? 'failed'),
        ),
      );
    const sh = result.shape;
    return h(
      'div',
      {},
      h(
        'p',
        { class: 'muted' },
        `B=${sh.batchSize} S=${sh.seqLen} E=${sh.embedDim} H=${sh.numHeads}${sh.isCausal ? ' causal' : ''}${sh.cacheLen ? ` over a KV cache of ${sh.cacheLen}` : ''} · ${si(result.flops)}FLOP · ` +
          `${result.warmup} warm-up, ${result.runs} timed runs · seed ${result.seed} · gate: |out − ref| ≤ ${result.tolerance.atol.toExponential(1)}·(1 + |ref|), ×${result.peerToleranceFactor} for peers`,
      ),
      h(
        'div',
        { class: 'table-scroll' },
        h(
          'table',
          { class: 'grid results', id: 'bench-table' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', {}, 'system'),
              h('th', {}, 'status'),
              h('th', { class: 'num' }, 'median ms'),
              h('th', { class: 'num' }, 'GFLOP/s'),
              h('th', { class: 'num', title: 'median of this system / median of this engine (> 1: slower)' }, 'vs engine'),
              h('th', { class: 'num', title: 'max |output − float64 reference| of the first run' }, 'max |err|'),
              h('th', { title: "each timed run; for this engine also the most GPU memory it held (weights + one call's scratch)" }, 'runs / failure'),
            ),
          ),
          h('tbody', {}, ...result.systems.map(row)),
        ),
      ),
      ...(result.notRun ?? []).map((s) => h('p', { class: 'muted', 'data-not-run': s.id }, `not run: ${s.label} (${s.reason})`)),
    );
  }

  function drawChart(result: RunResult): void {
    const ok = result.systems.filter((r) => r.status === 'ok' && r.medianMs !== undefined);
    chart?.destroy();
    chart = null;
    chartWrap.hidden = ok.length === 0;
    if (!ok.length) return;
    // Labels as lines narrow enough for the chart's width (Chart.js cuts a y label at the canvas's edge).
    labelWidth = chartWrap.clientWidth < 520 ? 18 : 28;
    const labels = ok.map((r) => wrapLabel(r.label, labelWidth));
    const rowHeight = Math.max(36, 15 * Math.max(...labels.map((lines) => lines.length)) + 10); // every row as tall as the tallest label
    chartWrap.style.height = `${70 + rowHeight * labels.length}px`;
    chart = new Chart(chartCanvas, {
      type: 'bar',
      data: {
        labels,
        datasets: [
          {
            label: 'median ms',
            data: ok.map((r) => r.medianMs!),
            backgroundColor: ok.map((r) => (r.id === 'engine' ? '#4e79a7' : '#a0aec0')),
          },
        ],
      },
      options: {
        indexAxis: 'y',
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: {
          x: {
            type: 'logarithmic',
            // A power of ten below the fastest median, so that its bar has a length even at 0.1 ms.
            min: 10 ** Math.floor(Math.log10(Math.min(...ok.map((r) => r.medianMs!)) / 1.5)),
            title: { display: true, text: 'median ms per forward (log scale, shorter is faster)' },
            // Only 1, 2 and 5 times a power of ten: the default labels every minor tick and they collide.
            ticks: {
              callback: (value) => {
                const v = Number(value);
                const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
                return [1, 2, 5].some((k) => Math.abs(m - k) < 1e-6) ? String(Number(v.toPrecision(3))) : '';
              },
            },
          },
          y: { ticks: { autoSkip: false } },
        },
        plugins: { tooltip: { callbacks: { label: (c) => `${fmtMs(c.parsed.x ?? 0)} ms` } } },
      },
    });
  }

  run.addEventListener('click', async () => {
    let shape: BenchShape;
    let opts: { warmup: number; runs: number; seed: number };
    try {
      shape = readShape();
      opts = {
        warmup: readInt(warmup.input, 'warm-up runs', 0, 100),
        runs: readInt(runs.input, 'timed runs', 1, 1000),
        seed: readInt(seed.input, 'seed', 0, 2 ** 32 - 1),
      };
    } catch (err) {
      progressText.textContent = errorMessage(err);
      return;
    }
    const systemIds = checks.filter((c) => c.input.checked).map((c) => c.input.value);
    if (!systemIds.length) {
      progressText.textContent = 'Tick at least one system.';
      return;
    }
    run.disabled = true;
    download.disabled = true;
    setState(section, 'running');
    progress.value = 0;
    tableWrap.replaceChildren();
    chart?.destroy();
    chart = null;
    chartWrap.hidden = true;
    try {
      const result = await runBenchmark(shape, systems, {
        ...opts,
        systemIds,
        onProgress: (p) => {
          progress.value = p.fraction;
          progressText.textContent = `${Math.round(p.fraction * 100)}% · ${p.message}`;
        },
      });
      last = result;
      progress.value = 1;
      const failed = result.systems.filter((r) => r.status === 'failed').length;
      progressText.textContent = `Done: ${result.systems.length - failed} ran, ${failed} failed.`;
      tableWrap.replaceChildren(resultsTable(result));
      drawChart(result);
      download.disabled = false;
      setState(section, 'done');
    } catch (err) {
      progressText.textContent = `The benchmark stopped: ${errorMessage(err)}`;
      setState(section, 'error');
    } finally {
      run.disabled = false;
    }
  });

  download.addEventListener('click', () => {
    if (!last) return;
    const json = resultsToJson(last, { adapter: engine.adapterInfo, backend: engine.backend, fallbackReason: engine.fallbackReason });
    const sh = last.shape;
    const a = h('a', {
      href: URL.createObjectURL(new Blob([json], { type: 'application/json' })),
      download: `webgpu-attention-bench-B${sh.batchSize}-S${sh.seqLen}-E${sh.embedDim}-H${sh.numHeads}${sh.isCausal ? '-causal' : ''}.json`,
    });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  });
}
