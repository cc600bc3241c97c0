// Decode-timeline panel: a layer (E, H, G, B) and a KV cache (mha.createKvCache({ batchSize,
// maxSeqLen, dtype })), or with "paged" B sequences of a PagedKvCache stepped in one call each;
// prefill a prompt in one causal forward, then decode one token at a time until the cache is full,
// timing each step (wall clock of `await forward`, readback included). Draws ms per token against the
// cache length, summarises the steps and the cache's memory beside an f16 cache's, and checks the last
// step's output against one causal forward over the whole sequence on the same engine.

import { CategoryScale, Chart, Legend, LinearScale, LineController, LineElement, PointElement, Tooltip } from 'chart.js';
import type { AttentionEngine, KvCache, KvCacheDtype, MultiHeadAttention, PagedKvCache } from 'webgpu-attention';
import { isBlockDtype, kvRowBytes } from '../../src/quant/kv.ts';
import { randomLayerInputs } from '../../test/helpers/random.ts';
import { isSoftware } from './adapter.ts';
import { checkboxField, errorMessage, h, numberField, readInt, setState } from './dom.ts';
import { median } from '../../src/util/stats.ts';

Chart.register(LineController, LineElement, PointElement, CategoryScale, LinearScale, Legend, Tooltip);

/**
 * Keys at which a one-token step switches to split-KV (flash-decoding) on WebGPU: 2 × SPLIT_KEYS in
 * src/webgpu/kernels/flash-attention.ts (splitKv).
 */
export const SPLIT_KV_MIN_KEYS = 512;
const MAX_SEQ_PRESETS = [256, 512, 768, 1024, 2048];
const MAX_SEQ_LIMIT = 8192;
/** Largest |diff| the check calls a pass: far above float32 rounding (~1e-7), far below a real bug. */
const DIFF_PASS = 1e-4;

interface DecodeSettings {
  embedDim: number;
  numHeads: number;
  numKvHeads: number;
  batchSize: number;
  maxSeqLen: number;
  prefill: number;
  seed: number;
  /** The cache's dtype; null: the engine's default. */
  dtype: KvCacheDtype | null;
  /** B sequences of a PagedKvCache, stepped in one call (sequences), instead of one cache of batch B. */
  paged: boolean;
}

/** Positions a block of the paged cache. */
const PAGED_BLOCK = 16;

type Point = { x: number; y: number };
type DecodeChart = Chart<'line', Point[]>;
/** Steps in the rolling median drawn over the points. */
const ROLLING = 15;

interface Step {
  /** Keys the step attended over: the cache length after appending its token. */
  keys: number;
  ms: number;
}

const yieldToPage = () => new Promise<void>((r) => setTimeout(r, 0));

function fmtMs(ms: number): string {
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);
}

/** Rows [s0, s1) of each batch element of x [B, S, E], as [B, s1 − s0, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, s0: number, s1: number): Float32Array {
  const out = new Float32Array(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

export function mountDecodePanel(section: HTMLElement, engine: AttentionEngine): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const webgpu = engine.backend === 'webgpu';
  const defaultDtype: KvCacheDtype = webgpu ? engine.precision : 'f32';
  // Defaults that show the switch to split-KV at SPLIT_KV_MIN_KEYS with many steps on either side:
  // on software a prompt of 256 and a cache of 768 (255 one-pass steps, then 257 split-KV ones, about
  // as many steps as a short run), elsewhere 16 and 2048.
  const software = isSoftware(engine);
  const defaultMax = software ? 768 : 2048;
  const defaultPrefill = software ? 256 : 16;

  const e = numberField('E (embed dim)', 'decode-e', 256, { max: 4096 });
  const hh = numberField('H (heads)', 'decode-h', 4, { max: 64 });
  const g = numberField('G (KV heads)', 'decode-g', 4, { max: 64, title: 'numKvHeads: G < H is grouped-query attention, G = 1 multi-query' });
  const b = numberField('B (batch)', 'decode-b', 1, { max: 16 });
  const preset = h(
    'select',
    { id: 'decode-preset' },
    ...MAX_SEQ_PRESETS.map((n) => h('option', { value: String(n) }, String(n))),
    h('option', { value: 'custom' }, 'custom'),
  );
  const maxSeq = numberField('maxSeqLen', 'decode-max', defaultMax, { min: 2, max: MAX_SEQ_LIMIT, title: 'the cache size: decoding stops when it is full' });
  const prefill = numberField('prefill tokens', 'decode-prefill', defaultPrefill, { max: MAX_SEQ_LIMIT - 1 });
  const seed = numberField('seed', 'decode-seed', 1, { min: 0 });
  const dtypeSelect = h(
    'select',
    { id: 'decode-dtype', title: "the cache's storage: floats, or ggml's q8_0 / q4_0 blocks of 32 read in place" },
    h('option', { value: '' }, `default (${engine.backend === 'webgpu' ? engine.precision : 'f32'})`),
    ...(['f32', 'f16', 'q8_0', 'q4_0'] as const).map((d) => h('option', { value: d }, d)),
  );
  const paged = checkboxField(
    'paged: B sequences, one call a step',
    'decode-paged',
    false,
    'B sequences of a PagedKvCache stepped together: forward(x, { kvCache, sequences })',
  );
  const info = h('p', { class: 'muted', id: 'decode-info' });

  const run = h('button', { type: 'button', id: 'decode-run', class: 'primary' }, 'Run decode');
  const stop = h('button', { type: 'button', id: 'decode-stop', disabled: true }, 'Stop');
  const progress = h('progress', { id: 'decode-progress', max: 1, value: 0 });
  const progressText = h('span', { class: 'status', id: 'decode-progress-text', 'aria-live': 'polite' }, 'Not run yet.');
  const summary = h('div', { id: 'decode-summary' });
  const chartCanvas = h('canvas', { id: 'decode-chart', role: 'img', 'aria-label': 'milliseconds per decoded token against the cache length' });
  const chartWrap = h('div', { class: 'chart-wrap decode-chart', hidden: true }, chartCanvas);

  body.append(
    h(
      'div',
      { class: 'form-row' },
      e.field,
      hh.field,
      g.field,
      b.field,
      h('label', { class: 'field', for: 'decode-preset' }, h('span', {}, 'cache size'), preset),
      maxSeq.field,
      prefill.field,
      seed.field,
      h('label', { class: 'field', for: 'decode-dtype' }, h('span', {}, 'cache dtype'), dtypeSelect),
      paged.field,
    ),
    info,
    h('div', { class: 'actions' }, run, stop),
    h('div', { class: 'progress-row' }, progress, progressText),
    h('div', { class: 'decode-results' }, chartWrap, summary),
  );
  setState(section, 'idle');

  const read = (): DecodeSettings => {
    const s: DecodeSettings = {
      embedDim: readInt(e.input, 'E', 1, 4096),
      numHeads: readInt(hh.input, 'H', 1, 64),
      numKvHeads: readInt(g.input, 'G', 1, 64),
      batchSize: readInt(b.input, 'B', 1, 16),
      maxSeqLen: readInt(maxSeq.input, 'maxSeqLen', 2, MAX_SEQ_LIMIT),
      prefill: readInt(prefill.input, 'prefill tokens', 1, MAX_SEQ_LIMIT - 1),
      seed: readInt(seed.input, 'seed', 0, 2 ** 32 - 1),
      dtype: (dtypeSelect.value || null) as KvCacheDtype | null,
      paged: paged.input.checked,
    };
    const Dh = s.embedDim / s.numHeads;
    if (s.dtype && isBlockDtype(s.dtype) && Dh % 32) throw new Error(`A ${s.dtype} cache stores blocks of 32 along the head: Dh (${Dh}) must be a multiple of 32.`);
    if (s.embedDim % s.numHeads) throw new Error(`E (${s.embedDim}) must be divisible by H (${s.numHeads}).`);
    if (s.numHeads % s.numKvHeads) throw new Error(`H (${s.numHeads}) must be divisible by G (${s.numKvHeads}): each KV head serves H / G query heads.`);
    if (s.prefill >= s.maxSeqLen) throw new Error(`prefill (${s.prefill}) must be below maxSeqLen (${s.maxSeqLen}), leaving room to decode.`);
    return s;
  };

  const describe = () => {
    try {
      const s = read();
      const steps = s.maxSeqLen - s.prefill;
      const splitSteps = webgpu ? Math.max(0, s.maxSeqLen - Math.max(s.prefill + 1, SPLIT_KV_MIN_KEYS) + 1) : 0;
      const kind = s.numKvHeads === s.numHeads ? 'multi-head' : s.numKvHeads === 1 ? 'multi-query' : 'grouped-query';
      const Dh = s.embedDim / s.numHeads;
      const dtype = s.dtype ?? defaultDtype;
      const cacheBytes = 2 * s.batchSize * s.numKvHeads * s.maxSeqLen * kvRowBytes(dtype, Dh);
      const f16Bytes = 2 * s.batchSize * s.numKvHeads * s.maxSeqLen * kvRowBytes('f16', Dh);
      info.textContent =
        `Dh = ${Dh}, ${kind} attention; the cache holds K and V [${s.batchSize}, ${s.numKvHeads}, ${s.maxSeqLen}, ${Dh}] ` +
        `as ${dtype} (${(cacheBytes / 2 ** 20).toPrecision(3)} MiB${dtype === 'f16' ? '' : `; f16: ${(f16Bytes / 2 ** 20).toPrecision(3)} MiB`})` +
        `${s.paged ? `, ${s.batchSize} sequence${s.batchSize === 1 ? '' : 's'} in blocks of ${PAGED_BLOCK} (one call a step)` : ''}. ${steps} decode step${steps === 1 ? '' : 's'}` +
        (webgpu ? `, ${splitSteps} of them split-KV.` : ' (CPU backend: no split-KV).');
      info.classList.remove('error-text');
      run.disabled = running;
      return true;
    } catch (err) {
      info.textContent = errorMessage(err);
      info.classList.add('error-text');
      run.disabled = true;
      return false;
    }
  };
  const syncPreset = () => {
    preset.value = MAX_SEQ_PRESETS.includes(Number(maxSeq.input.value)) ? maxSeq.input.value : 'custom';
  };
  preset.addEventListener('change', () => {
    if (preset.value !== 'custom') maxSeq.input.value = preset.value;
    describe();
  });
  maxSeq.input.addEventListener('input', () => {
    syncPreset();
    describe();
  });
  for (const f of [e, hh, g, b, prefill, seed]) f.input.addEventListener('input', describe);
  dtypeSelect.addEventListener('change', describe);
  paged.input.addEventListener('change', describe);
  syncPreset();

  let running = false;
  let stopRequested = false;
  let chart: DecodeChart | null = null;
  describe();

  /** Raw steps as points, coloured by kind, and a rolling median as a line. */
  function makeChart(s: DecodeSettings): DecodeChart {
    chart?.destroy();
    chart = null;
    chartWrap.hidden = false;
    const points = (label: string, color: string) => ({
      label,
      data: [] as Point[],
      borderColor: color,
      backgroundColor: color,
      showLine: false,
      clip: false as const, // the last point sits on the right edge
      pointRadius: 1.8,
      pointHoverRadius: 4,
      order: 2,
    });
    const datasets = [
      {
        label: `rolling median (${ROLLING} steps)`,
        data: [] as Point[],
        borderColor: '#1d2330',
        backgroundColor: '#1d2330',
        borderWidth: 1.5,
        pointRadius: 0,
        pointHoverRadius: 0,
        showLine: true,
        order: 1,
      },
      points(webgpu ? `one pass (< ${SPLIT_KV_MIN_KEYS} keys)` : 'decode step', '#4e79a7'),
    ];
    if (webgpu && s.maxSeqLen >= SPLIT_KV_MIN_KEYS) datasets.push(points(`split-KV (≥ ${SPLIT_KV_MIN_KEYS} keys)`, '#e15759'));
    chart = new Chart(chartCanvas, {
      type: 'line',
      data: { datasets },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        normalized: true,
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: {
          x: {
            type: 'linear',
            min: s.prefill + 1,
            max: s.maxSeqLen,
            ticks: { callback: (v) => String(v), includeBounds: false },
            title: { display: true, text: 'cache length (keys the step attends over)' },
          },
          y: { type: 'linear', beginAtZero: true, title: { display: true, text: 'ms per decode step' } },
        },
        plugins: {
          legend: { position: 'top', align: 'end', labels: { boxWidth: 10, boxHeight: 10 } },
          tooltip: { callbacks: { title: (items) => `${items[0]?.parsed.x} keys`, label: (c) => `${c.dataset.label}: ${fmtMs(c.parsed.y ?? 0)} ms` } },
        },
      },
    });
    return chart;
  }

  /** Redraws the chart with the rolling median of `steps`. */
  function paintChart(c: DecodeChart, steps: Step[]): void {
    const line = c.data.datasets[0].data;
    for (let i = line.length; i < steps.length; i++) {
      const window = steps.slice(Math.max(0, i - ROLLING + 1), i + 1).map((st) => st.ms);
      line.push({ x: steps[i].keys, y: median(window) });
    }
    c.update('none');
  }

  /** The steps of each kind (all; one pass and split-KV when both occur): count, cache lengths, first, median and last ms, tokens/s. */
  function stepsTable(s: DecodeSettings, steps: Step[], stopped: boolean): HTMLElement {
    const isSplit = (st: Step) => webgpu && st.keys >= SPLIT_KV_MIN_KEYS;
    const groups: { label: string; steps: Step[]; ids: boolean }[] = [{ label: stopped ? 'all steps (stopped)' : 'all steps', steps, ids: true }];
    const single = steps.filter((st) => !isSplit(st));
    const split = steps.filter(isSplit);
    if (single.length && split.length) {
      groups.push(
        { label: `one pass (< ${SPLIT_KV_MIN_KEYS} keys)`, steps: single, ids: false },
        { label: `split-KV (≥ ${SPLIT_KV_MIN_KEYS} keys)`, steps: split, ids: false },
      );
    }
    const cell = (v: string, id: string | false) => h('td', { class: 'num', id: id || null }, v);
    const row = ({ label, steps: g, ids }: (typeof groups)[number]) => {
      const ms = g.map((st) => st.ms);
      const total = ms.reduce((a, v) => a + v, 0);
      return h(
        'tr',
        {},
        h('td', {}, label),
        cell(String(g.length), ids && 'decode-steps'),
        cell(`${g[0].keys} → ${g[g.length - 1].keys}`, ids && 'decode-range'),
        cell(fmtMs(ms[0]), ids && 'decode-first'),
        cell(fmtMs(median(ms)), ids && 'decode-median'),
        cell(fmtMs(ms[ms.length - 1]), ids && 'decode-last'),
        cell(((s.batchSize * g.length) / (total / 1000)).toPrecision(3), ids && 'decode-tps'),
      );
    };
    return h(
      'table',
      { class: 'grid results decode-steps', id: 'decode-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'decode steps'),
          h('th', { class: 'num' }, 'steps'),
          h('th', { class: 'num', title: 'keys attended by the first and the last step' }, 'cache length'),
          h('th', { class: 'num' }, 'first ms'),
          h('th', { class: 'num' }, 'median ms'),
          h('th', { class: 'num' }, 'last ms'),
          h('th', { class: 'num', title: 'B · steps / the steps’ total time' }, 'tokens/s'),
        ),
      ),
      h('tbody', {}, ...groups.map(row)),
    );
  }

  function checkLine(check: { maxDiff: number; length: number; rounded: KvCacheDtype | null }): HTMLElement {
    const pass = check.maxDiff <= DIFF_PASS;
    const line = (cls: string, badge: string, verdict: string, ...tail: (string | HTMLElement)[]) =>
      h(
        'p',
        { class: `note ${cls}`, id: 'decode-check' },
        h('span', { class: `badge ${badge}`, id: 'decode-verdict' }, verdict),
        ` The last step's output against one causal forward over all ${check.length} positions (same engine, no cache): max |diff| = `,
        h('strong', { id: 'decode-maxdiff' }, check.maxDiff === 0 ? '0' : check.maxDiff.toExponential(2)),
        ...tail,
      );
    if (check.rounded && Number.isFinite(check.maxDiff)) {
      // The cache rounds K and V to its dtype: the difference is that rounding, not a pass or a failure (the tests check these caches against the float64 reference over their own values).
      return line('', 'info', check.rounded.toUpperCase(), ` (K and V stored as ${check.rounded}: the cache's rounding, beyond float32's).`);
    }
    return line(
      pass ? 'ok' : 'error',
      pass ? 'pass' : 'fail',
      pass ? 'PASS' : 'FAIL',
      check.maxDiff === 0 ? ' (bit-identical).' : pass ? ' (float32 rounding).' : ` (more than ${DIFF_PASS.toExponential(0)}).`,
    );
  }

  /** The cache's bytes beside an f16 cache's of the same size (made and disposed here), as a line. */
  function memoryLine(s: DecodeSettings, bytes: number, dtype: KvCacheDtype, layer: MultiHeadAttention): HTMLElement {
    let f16: number | null = null;
    try {
      const probe = s.paged
        ? layer.createPagedKvCache({ blockSize: PAGED_BLOCK, maxBlocks: s.batchSize * Math.ceil(s.maxSeqLen / PAGED_BLOCK), dtype: 'f16' })
        : layer.createKvCache({ batchSize: s.batchSize, maxSeqLen: s.maxSeqLen, dtype: 'f16' });
      f16 = probe.bytes;
      probe.dispose();
    } catch {
      f16 = null; // a backend without f16 caches
    }
    const mib = (n: number) => `${(n / 2 ** 20).toPrecision(3)} MiB`;
    return h(
      'p',
      { class: 'muted', id: 'decode-memory' },
      `Cache memory (cache.bytes): ${mib(bytes)} as ${dtype}`,
      ...(f16 !== null && dtype !== 'f16'
        ? [`; an f16 cache of the same size: ${mib(f16)} (`, h('strong', { id: 'decode-memory-ratio' }, `${(bytes / f16).toFixed(2)}×`), ').']
        : ['.']),
    );
  }

  async function decode(): Promise<void> {
    let s: DecodeSettings;
    try {
      s = read();
    } catch (err) {
      progressText.textContent = errorMessage(err);
      return;
    }
    running = true;
    stopRequested = false;
    run.disabled = true;
    stop.disabled = false;
    setState(section, 'running');
    progress.value = 0;
    summary.replaceChildren();
    const { embedDim: E, numHeads: H, numKvHeads: G, batchSize: B, maxSeqLen: M, prefill: P } = s;
    const total = M - P;
    let layer: MultiHeadAttention | null = null;
    let cache: KvCache | PagedKvCache | null = null;
    const steps: Step[] = [];
    let c: DecodeChart | null = null;
    try {
      c = makeChart(s);
      const points = (split: boolean) => c!.data.datasets[split ? 2 : 1].data;
      // Every token of the run, x [B, maxSeqLen, E]: the prompt, then one row per decode step.
      const config = { embedDim: E, numHeads: H, numKvHeads: G };
      const { stateDict, query: x } = randomLayerInputs(config, B * M, s.seed);
      layer = engine.createMultiHeadAttention(config, stateDict);
      const dtype = s.dtype ?? undefined;
      let ids: number[] = [];
      let pagedCache: PagedKvCache | null = null;
      let plainCache: KvCache | null = null;
      if (s.paged) {
        pagedCache = layer.createPagedKvCache({ blockSize: PAGED_BLOCK, maxBlocks: B * Math.ceil(M / PAGED_BLOCK), dtype });
        ids = Array.from({ length: B }, () => pagedCache!.addSequence());
        cache = pagedCache;
      } else {
        plainCache = layer.createKvCache({ batchSize: B, maxSeqLen: M, dtype });
        cache = plainCache;
      }
      /** One call over rows of x [B, n, E]: the batch on the plain cache, or B sequences of n tokens on the paged one. */
      const step = (xs: Float32Array, n: number) =>
        pagedCache
          ? layer!.forward(xs, { kvCache: pagedCache, sequences: ids.map((id) => ({ id, length: n })) })
          : layer!.forward(xs, { batchSize: B, seqLen: n, kvCache: plainCache!, isCausal: true });

      progressText.textContent = `Prefilling ${P} tokens…`;
      await yieldToPage();
      const t0 = performance.now();
      await step(rows(x, B, M, E, 0, P), P);
      const prefillMs = performance.now() - t0;

      let last: Float32Array | null = null;
      let lastPaint = 0;
      const paint = () => {
        paintChart(c!, steps);
        lastPaint = performance.now();
      };
      for (let pos = P; pos < M && !stopRequested; pos++) {
        const token = rows(x, B, M, E, pos, pos + 1);
        const t = performance.now();
        last = (await step(token, 1)).output;
        const ms = performance.now() - t;
        const keys = pos + 1;
        const split = webgpu && keys >= SPLIT_KV_MIN_KEYS;
        steps.push({ keys, ms });
        points(split).push({ x: keys, y: ms });
        const done = steps.length;
        progress.value = done / total;
        progressText.textContent = `step ${done} of ${total} · cache length ${keys} · ${fmtMs(ms)} ms${split ? ' (split-KV)' : ''}`;
        // Repaint the chart and let the page (and the Stop button) breathe, a few times a second.
        if (performance.now() - lastPaint > 150) {
          paint();
          await yieldToPage();
        }
      }
      paint();
      const stopped = steps.length < total;

      // The check: one causal forward (no cache) over every position decoded so far; its last row of
      // each batch element is what the last decode step computed.
      let check: { maxDiff: number; length: number; rounded: KvCacheDtype | null } | null = null;
      if (last) {
        const L = P + steps.length;
        progressText.textContent = `Checking: one causal forward over ${L} positions…`;
        await yieldToPage();
        const full = (await layer.forward(rows(x, B, M, E, 0, L), { batchSize: B, seqLen: L, isCausal: true })).output;
        let maxDiff = 0;
        for (let bi = 0; bi < B; bi++) {
          for (let i = 0; i < E; i++) {
            const d = Math.abs(last[bi * E + i] - full[(bi * L + L - 1) * E + i]);
            maxDiff = Number.isNaN(d) ? Infinity : Math.max(maxDiff, d);
          }
        }
        const stored = cache.dtype;
        check = { maxDiff, length: L, rounded: stored === 'f32' || stored === defaultDtype ? null : stored };
      }
      progress.value = steps.length / total;
      progressText.textContent = stopped ? `Stopped after ${steps.length} of ${total} decode steps.` : `Done: ${total} decode steps, cache full (${M}).`;
      summary.replaceChildren(
        h(
          'p',
          { class: 'muted', id: 'decode-prefill-time' },
          `Prefill: ${P} token${P === 1 ? '' : 's'}${B > 1 ? ` × ${B} sequences` : ''} in one ${s.paged ? 'paged call' : 'causal forward'}, ${fmtMs(prefillMs)} ms ` +
            '(a new layer shape’s first forward includes compiling its pipelines).',
        ),
        ...(steps.length ? [stepsTable(s, steps, stopped)] : []),
        ...(webgpu && steps.some((st) => st.keys >= SPLIT_KV_MIN_KEYS)
          ? [h('p', { class: 'muted small' }, 'The first split-KV step of a new layer shape may include building the split and merge pipelines.')]
          : []),
        memoryLine(s, cache.bytes, cache.dtype, layer),
        ...(check ? [checkLine(check)] : []),
      );
      // A float cache fails the check past float32 rounding; a rounded one (f16, q8_0, q4_0 below the engine's precision) only on a NaN.
      const failed = check !== null && (check.rounded ? !Number.isFinite(check.maxDiff) : check.maxDiff > DIFF_PASS);
      setState(section, failed ? 'error' : 'done');
    } catch (err) {
      progressText.textContent = `The decode run stopped: ${errorMessage(err)}`;
      if (c && steps.length) paintChart(c, steps);
      setState(section, 'error');
    } finally {
      cache?.dispose();
      layer?.dispose();
      running = false;
      stop.disabled = true;
      describe();
    }
  }

  run.addEventListener('click', () => void decode());
  stop.addEventListener('click', () => {
    stopRequested = true;
    stop.disabled = true;
    progressText.textContent = 'Stopping after this step…';
  });
}
