// Correctness panel: the layer on the engine's backend (WebGPU) against the float64 CPU reference,
// with the test suite's rule |out − ref| ≤ atol + rtol·|ref| (atol = rtol = 16·√(E + S + E)·2⁻²³).

import { type AttentionEngine, referenceOutput } from 'webgpu-attention';
import { benchInputs, engineTolerance } from '../bench/runner.ts';
import { compareArrays } from '../../src/util/tolerance.ts';
import { errorMessage, h, setState } from './dom.ts';
import { describeOptions, forwardOptionsOf, type LayerConfig, layerConfigOf } from './layer-config.ts';

const nextFrame = () => new Promise<void>((r) => requestAnimationFrame(() => setTimeout(r, 0)));

export function mountCorrectnessPanel(section: HTMLElement, engine: AttentionEngine, config: LayerConfig): { run: () => Promise<void> } {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const button = h(
    'button',
    { type: 'button', id: 'correctness-run', class: 'primary' },
    'Run on ',
    engine.backend === 'webgpu' ? 'WebGPU' : 'the CPU backend',
    ' and compare',
  );
  const status = h('span', { class: 'status', id: 'correctness-status', 'aria-live': 'polite' });
  const result = h('div', { id: 'correctness-result' });
  // engine.warmup: compile, with a progress bar, the final kernels this shape will run, so that its
  // next run is at full speed (a first run meanwhile runs the kernels that compile fastest).
  const warm = h(
    'button',
    { type: 'button', id: 'correctness-warmup', title: 'engine.warmup(): compile the kernels this shape runs once settled' },
    'Compile its kernels',
  );
  const progress = h('progress', { id: 'correctness-warmup-progress', max: '1', value: '0', hidden: '' }) as HTMLProgressElement;
  const warmStatus = h('span', { class: 'status', id: 'correctness-warmup-status', 'aria-live': 'polite' });
  body.append(h('div', { class: 'actions' }, button, status), h('div', { class: 'actions' }, warm, progress, warmStatus), result);
  warm.hidden = engine.backend !== 'webgpu';
  warm.addEventListener('click', async () => {
    const shape = config.tryRead();
    if (!shape) {
      warmStatus.textContent = 'Fix the layer shape above first.';
      return;
    }
    warm.disabled = true;
    delete warmStatus.dataset.state;
    progress.hidden = false;
    progress.value = 0;
    warmStatus.textContent = 'compiling…';
    const t0 = performance.now();
    const layer = engine.createMultiHeadAttention(layerConfigOf(shape), benchInputs(shape, shape.seed).stateDict);
    try {
      await engine.warmup([{ layer, batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal }], {
        onProgress: ({ done, total, kernel, variant }) => {
          progress.value = done / total;
          warmStatus.textContent = `${done} of ${total}: ${kernel} ${variant}`;
        },
      });
      warmStatus.textContent = `compiled in ${((performance.now() - t0) / 1000).toFixed(1)} s: the next run of this shape runs its final kernels`;
      warmStatus.dataset.state = 'done';
    } catch (e) {
      warmStatus.textContent = `could not compile: ${errorMessage(e)}`;
      warmStatus.dataset.state = 'error';
    } finally {
      layer.dispose();
      warm.disabled = false;
    }
  });
  setState(section, 'idle');

  async function run(): Promise<void> {
    const shape = config.tryRead();
    if (!shape) {
      status.textContent = 'Fix the layer shape above first.';
      setState(section, 'error');
      return;
    }
    button.disabled = true;
    setState(section, 'running');
    result.replaceChildren();
    try {
      const { stateDict, query } = benchInputs(shape, shape.seed);
      const config = layerConfigOf(shape);
      const options = forwardOptionsOf(shape);
      status.textContent = `Running the layer on ${engine.backend}…`;
      await nextFrame();
      const device = engine.device;
      device?.pushErrorScope('out-of-memory');
      device?.pushErrorScope('validation');
      let output: Float32Array | null = null;
      let thrown: unknown = null;
      const t0 = performance.now();
      try {
        const layer = engine.createMultiHeadAttention(config, stateDict);
        try {
          output = (await layer.forward(query, options)).output;
        } finally {
          layer.dispose();
        }
      } catch (e) {
        thrown = e;
      }
      const engineMs = performance.now() - t0;
      const validation = device ? await device.popErrorScope() : null;
      const oom = device ? await device.popErrorScope() : null;
      const scopeErrors = [validation && `validation: ${validation.message}`, oom && `out of memory: ${oom.message}`].filter(Boolean) as string[];
      if (thrown) throw thrown;

      status.textContent = 'Computing the float64 CPU reference…';
      await nextFrame();
      const t1 = performance.now();
      const reference = await referenceOutput(config, stateDict, query, options, (pass) => {
        status.textContent = `Computing the float64 CPU reference… pass ${pass} of 3 done`;
        return nextFrame();
      });
      const refMs = performance.now() - t1;

      const tol = engineTolerance(shape);
      const cmp = compareArrays(output!, reference, tol, 3);
      const pass = cmp.ok && scopeErrors.length === 0;
      const rows: [string, Node | string][] = [
        ['backend', engine.backend === 'webgpu' ? 'WebGPU' : 'CPU backend (no WebGPU here: this compares the reference with itself)'],
        ['attention', h('span', { id: 'correctness-options' }, describeOptions(shape.options))],
        ['elements compared', `${output!.length.toLocaleString('en-US')}  ([B, S, E] = [${shape.batchSize}, ${shape.seqLen}, ${shape.embedDim}])`],
        ['max abs error', h('span', { id: 'correctness-max-abs' }, cmp.maxAbs.toExponential(3))],
        ['max rel error', h('span', { id: 'correctness-max-rel' }, `${cmp.maxRel.toExponential(3)}  (large where |ref| ≈ 0; the rule below allows for it)`)],
        ['tolerance', `|out − ref| ≤ atol + rtol·|ref|, atol = rtol = 16·√(E + S + E)·2⁻²³ = ${tol.atol.toExponential(2)}`],
        ['elements outside', String(cmp.count)],
        ['verdict', h('span', { class: `badge ${pass ? 'pass' : 'fail'}`, id: 'correctness-verdict' }, pass ? 'PASS' : 'FAIL')],
        ['time', `engine ${engineMs.toFixed(1)} ms (a shape's first run includes compiling its pipelines) · reference ${refMs.toFixed(0)} ms`],
      ];
      if (scopeErrors.length) rows.push(['WebGPU errors', scopeErrors.join('; ')]);
      for (const m of cmp.mismatches)
        rows.push([`mismatch [${m.index}]`, `got ${m.actual}, expected ${m.expected}, |err| ${m.error.toExponential(2)} > ${m.allowed.toExponential(2)}`]);
      result.replaceChildren(h('table', { class: 'kv' }, h('tbody', {}, ...rows.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v))))));
      status.textContent = '';
      setState(section, 'done');
    } catch (e) {
      status.textContent = '';
      result.replaceChildren(h('p', { class: 'note error', id: 'correctness-error' }, `The layer could not run: ${errorMessage(e)}`));
      setState(section, 'error');
    } finally {
      button.disabled = false;
    }
  }

  button.addEventListener('click', () => void run());
  return { run };
}
