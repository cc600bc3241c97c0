// The demo page (demo/index.html) in Chromium, served by the e2e dev server (repo root, so the page is
// /demo/index.html). Every panel is driven as a person would, through its controls, and the page
// must stay clean: no console error, no page error, no uncaptured WebGPU error (the page lists those
// in #gpu-errors). The page must run on the WebGPU backend: a browser without WebGPU fails here.
//
// All tests share one page (one engine, pipelines compiled once), in order.

import { expect } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { test } from './demo-page.ts';

// The worker's page is shared across spec files: start this file from a freshly loaded page.
test.beforeAll(async ({ demo }, testInfo) => {
  testInfo.setTimeout(120_000);
  await demo.fresh();
});

test('the page loads on WebGPU and the adapter panel describes the adapter', async ({ demo }) => {
  await demo.requireWebGPU();
  const { page } = demo;
  await expect(page.locator('#adapter')).toHaveAttribute('data-state', 'done');
  await expect(page.locator('#engine-backend')).toHaveText('webgpu');
  await expect(page.locator('#backend-status')).toContainText('WebGPU');
  const adapter = page.locator('#adapter');
  for (const row of ['vendor', 'architecture', 'device', 'description', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize']) {
    await expect(adapter.locator('th', { hasText: row }).first()).toBeVisible();
  }
  expect(await page.locator('#adapter-features li').count()).toBeGreaterThan(0);
  await demo.expectClean(0);
});

test('correctness: WebGPU matches the float64 reference (default shape, then S=33 causal)', async ({ demo }) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  // The page ran the default shape on load; run it again from the button.
  await page.click('#correctness-run');
  expect(await demo.settled('correctness')).toBe('done');
  await expect(page.locator('#correctness-verdict')).toHaveText('PASS');
  // engine.warmup with a progress bar: the final kernels of this shape, all three reported.
  await page.click('#correctness-warmup');
  await expect(page.locator('#correctness-warmup-status')).toHaveAttribute('data-state', 'done', { timeout: 120_000 });
  await expect(page.locator('#correctness-warmup-progress')).toHaveJSProperty('value', 1);
  // An awkward shape: S one past a tile, odd B, causal.
  await page.fill('#cfg-b', '3');
  await page.fill('#cfg-s', '33');
  await page.fill('#cfg-e', '96');
  await page.fill('#cfg-h', '6');
  await page.check('#cfg-causal');
  await page.click('#correctness-run');
  expect(await demo.settled('correctness')).toBe('done');
  await expect(page.locator('#correctness-verdict')).toHaveText('PASS');
  const maxAbs = Number(await page.locator('#correctness-max-abs').textContent());
  expect(maxAbs).toBeGreaterThanOrEqual(0);
  expect(maxAbs).toBeLessThan(1e-4);
  await expect(page.locator('#correctness-result')).toContainText('[3, 33, 96]');
  await demo.expectClean(mark);
});

test('shape flow follows the chosen layer: shapes, 4E²+4E parameters, FLOPs, head mixing', async ({ demo }) => {
  const { page } = demo;
  const mark = demo.mark();
  await page.fill('#cfg-b', '2');
  await page.fill('#cfg-s', '64');
  await page.fill('#cfg-e', '128');
  await page.fill('#cfg-h', '4');
  await page.uncheck('#cfg-causal');
  const table = page.locator('#shape-flow-table');
  await expect(table).toContainText('(B, H, S, Dh) = (2, 4, 64, 32)');
  await expect(table).toContainText('(B, H, S, S) = (2, 4, 64, 64)');
  await expect(table).toContainText('never stored');
  await expect(page.locator('#shape-flow-counts')).toContainText('66,048'); // 4·128² + 4·128
  await expect(page.locator('#shape-flow-counts')).toContainText('20,971,520'); // 8·2·64·128² + 4·2·64²·128
  await expect(page.locator('#head-mix-summary')).toContainText('draws on all 4 heads');
  await page.fill('#cfg-h', '8');
  await expect(page.locator('#head-mix-summary')).toContainText('draws on all 8 heads');
  await expect(table).toContainText('(B, H, S, Dh) = (2, 8, 64, 16)');
  await demo.expectClean(mark);
});

test('attention maps: one heatmap per head from needWeights, heads differ, causal masks the upper triangle', async ({ demo }, testInfo) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#attention-maps');
  expect(await demo.settled('attention-maps')).toBe('done');
  await expect(page.locator('#maps-status')).toContainText('from the engine on WebGPU (needWeights)');
  await expect(panel.locator('figure.head')).toHaveCount(4);
  const aboveFull = await panel.locator('figure.head').evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.massAboveDiagonal)));
  for (const m of aboveFull) expect(m, 'not causal: future keys get probability').toBeGreaterThan(0.05);

  // Heads differ: their mean row entropies are not all the same.
  const captions = await panel.locator('figure.head figcaption').allTextContents();
  const entropies = captions.map((c) => Number(/entropy ([\d.]+) bits/.exec(c)?.[1]));
  expect(entropies.every(Number.isFinite), captions.join(' | ')).toBe(true);
  expect(new Set(entropies.map((e) => e.toFixed(2))).size, `mean entropies ${entropies}`).toBeGreaterThan(1);

  // The canvases have content (not blank).
  const inked = await page.evaluate(() =>
    Array.from(document.querySelectorAll<HTMLCanvasElement>('#attention-maps canvas.heatmap')).map((c) => {
      const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
      return n / (c.width * c.height);
    }),
  );
  expect(inked.length).toBe(4);
  for (const f of inked) expect(f).toBeGreaterThan(0.1);
  const shot = testInfo.outputPath('attention-maps.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('attention maps (zh, 4 heads)', { path: shot, contentType: 'image/png' });

  // The English sentence, 8 heads, causal.
  await page.selectOption('#maps-sentence', 'en');
  expect(await demo.settled('attention-maps')).toBe('done');
  await page.selectOption('#maps-heads', '8');
  await page.check('#maps-causal');
  await expect(panel.locator('figure.head')).toHaveCount(8);
  expect(await demo.settled('attention-maps')).toBe('done');
  await expect(page.locator('#maps-status')).toContainText('10 tokens');
  const above = await panel.locator('figure.head').evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.massAboveDiagonal)));
  expect(above, 'probability on future keys, per head (causal)').toEqual(Array(8).fill(0));
  const causalShot = testInfo.outputPath('attention-maps-causal.png');
  await panel.screenshot({ path: causalShot });
  await testInfo.attach('attention maps (en, 8 heads, causal)', { path: causalShot, contentType: 'image/png' });

  // Your own sentence.
  await page.fill('#maps-text', 'a b c');
  await expect(page.locator('#maps-sentence')).toHaveValue('custom');
  await expect(page.locator('#maps-status')).toContainText('3 tokens');
  expect(await demo.settled('attention-maps')).toBe('done');
  await demo.expectClean(mark);
});

test('correctness with the attention options: linear attention, then rotary + softcap + sinks + ALiBi, each against the float64 reference', async ({ demo }) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.fill('#cfg-b', '2');
  await page.fill('#cfg-s', '70');
  await page.fill('#cfg-e', '48');
  await page.fill('#cfg-h', '4');
  await page.check('#cfg-causal');
  await page.selectOption('#cfg-attention', 'linear');
  await page.click('#correctness-run');
  expect(await demo.settled('correctness')).toBe('done');
  await expect(page.locator('#correctness-options')).toHaveText('linear');
  await expect(page.locator('#correctness-verdict')).toHaveText('PASS');
  // Linear attention takes no score options: the form says so.
  await page.check('#cfg-sinks');
  await expect(page.locator('#cfg-message')).toContainText('softmax attention only');
  await page.selectOption('#cfg-attention', 'softmax');
  await page.check('#cfg-rotary');
  await page.fill('#cfg-softcap', '30');
  await page.check('#cfg-alibi');
  await page.click('#correctness-run');
  expect(await demo.settled('correctness')).toBe('done');
  await expect(page.locator('#correctness-options')).toHaveText('softmax, rotary, softcap 30, sinks, ALiBi');
  await expect(page.locator('#correctness-verdict')).toHaveText('PASS');
  // Back to plain attention for the tests after this one.
  for (const id of ['#cfg-rotary', '#cfg-sinks', '#cfg-alibi', '#cfg-causal']) await page.uncheck(id);
  await page.fill('#cfg-softcap', '0');
  await demo.expectClean(mark);
});

test("attention maps beside linear attention: a linear map per head, and the engine's linear layer matches the reference", async ({ demo }, testInfo) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#attention-maps');
  await page.selectOption('#maps-sentence', 'en');
  await page.selectOption('#maps-heads', '2');
  await page.uncheck('#maps-causal');
  await page.check('#maps-linear');
  await expect(panel.locator('figure.head[data-linear]')).toHaveCount(2);
  expect(await demo.settled('attention-maps')).toBe('done');
  await expect(panel.locator('figure.head')).toHaveCount(4);
  const check = (await page.locator('#maps-linear-check').textContent()) ?? '';
  const diff = Number(/= ([\d.e+-]+)\./.exec(check)?.[1]);
  expect(diff, check).toBeLessThan(1e-4);
  // The linear maps are flatter than the softmax ones on average (higher row entropy).
  const mean = async (sel: string) =>
    (await panel.locator(sel).evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.meanEntropy)))).reduce((a, b) => a + b, 0);
  expect(await mean('figure.head[data-linear]')).toBeGreaterThan(await mean('figure.head:not([data-linear])'));
  const shot = testInfo.outputPath('attention-maps-linear.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('softmax beside linear attention (en, 2 heads)', { path: shot, contentType: 'image/png' });
  await page.uncheck('#maps-linear');
  await expect(panel.locator('figure.head[data-linear]')).toHaveCount(0);
  await demo.expectClean(mark);
});

test('benchmark: tiny preset, 1 warm-up, 1 run: every system shows a time or an explicit failure; JSON downloads', async ({ demo }, testInfo) => {
  test.setTimeout(240_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.selectOption('#bench-preset', 'tiny');
  await page.fill('#bench-warmup', '1');
  await page.fill('#bench-runs', '1');
  const ids = await page.locator('#benchmark fieldset.systems [data-system]').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.system));
  expect(ids).toEqual(['engine', 'naive', 'tfjs', 'ort', 'wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm', 'cpu']);
  for (const id of ids) await page.check(`#bench-sys-${id}`);

  await page.click('#bench-run');
  await expect(page.locator('#benchmark')).toHaveAttribute('data-state', 'running');
  expect(await demo.settled('benchmark', 200_000)).toBe('done');
  expect(await page.locator('#bench-progress').evaluate((p) => (p as HTMLProgressElement).value)).toBe(1);

  const rows = page.locator('#bench-table tbody tr');
  await expect(rows).toHaveCount(ids.length);
  const summary: string[] = [];
  for (const id of ids) {
    const row = page.locator(`#bench-table tr[data-system="${id}"]`);
    const status = await row.getAttribute('data-status');
    const cells = await row.locator('td').allTextContents();
    summary.push(`${id}: ${cells.join(' | ')}`);
    if (status === 'ok') {
      expect(Number(cells[2]), `median ms of ${id}`).toBeGreaterThanOrEqual(0);
      expect(Number(cells[3]), `GFLOP/s of ${id}`).toBeGreaterThan(0);
    } else {
      expect(status).toBe('failed');
      expect(cells[6].trim().length, `failure message of ${id}`).toBeGreaterThan(5);
    }
  }
  testInfo.annotations.push({ type: 'benchmark', description: summary.join('\n') });
  // This engine itself must run and pass its gate on WebGPU.
  await expect(page.locator('#bench-table tr[data-system="engine"]')).toHaveAttribute('data-status', 'ok');
  await expect(page.locator('#bench-chart')).toBeVisible();
  const shot = testInfo.outputPath('benchmark.png');
  await page.locator('#benchmark').screenshot({ path: shot });
  await testInfo.attach('benchmark (tiny)', { path: shot, contentType: 'image/png' });

  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#bench-download')]);
  const file = testInfo.outputPath(download.suggestedFilename());
  await download.saveAs(file);
  await testInfo.attach('benchmark JSON', { path: file, contentType: 'application/json' });
  const json = JSON.parse(readFileSync(file, 'utf8'));
  expect(json.backend).toBe('webgpu');
  expect(json.adapter).not.toBeNull();
  expect(json.userAgent).toContain('Chrome');
  expect(json.shape).toEqual({ batchSize: 1, seqLen: 16, embedDim: 32, numHeads: 2, isCausal: false });
  expect(json.versions['webgpu-attention']).toMatch(/^\d+\.\d+\.\d+/);
  expect(json.systems.map((s: { id: string }) => s.id)).toEqual(ids);
  await demo.expectClean(mark);
});

test('benchmark: a decode preset runs this engine on a KV cache and lists the peers as not run', async ({ demo }) => {
  test.setTimeout(240_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.selectOption('#bench-preset', 'decode-1024');
  await expect(page.locator('#bench-shape-info')).toContainText('KV cache of 1024');
  await page.fill('#bench-warmup', '0');
  await page.fill('#bench-runs', '1');
  for (const id of ['engine', 'naive', 'tfjs', 'ort', 'wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm', 'cpu']) {
    await (['engine', 'tfjs', 'wasm'].includes(id) ? page.check(`#bench-sys-${id}`) : page.uncheck(`#bench-sys-${id}`));
  }
  await page.click('#bench-run');
  expect(await demo.settled('benchmark', 200_000)).toBe('done');
  // The engine and 'wasm' pass the gate against the float64 backend on the same cache; TF.js is not run.
  await expect(page.locator('#bench-table tbody tr')).toHaveCount(2);
  for (const id of ['engine', 'wasm']) await expect(page.locator(`#bench-table tr[data-system="${id}"]`)).toHaveAttribute('data-status', 'ok');
  await expect(page.locator('#benchmark [data-not-run="tfjs"]')).toContainText('no KV cache');
  await expect(page.locator('#benchmark')).toContainText('over a KV cache of 1024');
  // Editing a shape field leaves the preset: the shape has no cache then.
  await page.fill('#bench-s', '2');
  await expect(page.locator('#bench-preset')).toHaveValue('custom');
  await expect(page.locator('#bench-shape-info')).not.toContainText('KV cache');
  await demo.expectClean(mark);
});

test('scaling: S = 16, 32 at E=32 H=2, engine only, 0 warm-up, 1 run: ms and GFLOP/s per S, two log-log charts, JSON; Stop stops between sizes', async ({
  demo,
}, testInfo) => {
  test.setTimeout(180_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#scaling');
  await expect(page.locator('header nav a[href="#scaling"]')).toHaveText('Scaling');
  await expect(panel).toHaveAttribute('data-state', 'idle');
  // Defaults: B=1 E=512 H=8, 1 warm-up, 2 runs, this engine and TF.js; the list stops at 2048 on a software adapter.
  const software = /swiftshader/i.test((await page.locator('#footer-backend').textContent()) ?? '');
  await expect(page.locator('#scale-s-list')).toHaveValue(software ? '128, 256, 512, 1024, 2048' : '128, 256, 512, 1024, 2048, 4096, 8192');
  await expect(page.locator('#scale-software')).toContainText(software ? 'stops at S = 2048' : 'takes minutes');
  for (const [id, value] of [
    ['b', '1'],
    ['e', '512'],
    ['h', '8'],
    ['warmup', '1'],
    ['runs', '2'],
  ])
    await expect(page.locator(`#scale-${id}`)).toHaveValue(value);
  const ids = await panel.locator('fieldset.systems [data-system]').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.system));
  expect(ids).toEqual(['engine', 'naive', 'tfjs', 'ort', 'wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm', 'cpu']);
  for (const id of ids) {
    if (id === 'engine' || id === 'tfjs') await expect(page.locator(`#scale-sys-${id}`)).toBeChecked();
    else await expect(page.locator(`#scale-sys-${id}`)).not.toBeChecked();
  }
  await expect(page.locator('#scale-stop')).toBeDisabled();

  await page.fill('#scale-s-list', '32 16'); // any order, spaces or commas
  await page.fill('#scale-e', '32');
  await page.fill('#scale-h', '2');
  await page.fill('#scale-warmup', '0');
  await page.fill('#scale-runs', '1');
  await page.uncheck('#scale-sys-tfjs');
  await expect(page.locator('#scale-info')).toContainText('2 sizes, S = 16, 32');
  await page.click('#scale-run');
  expect(await demo.settled('scaling', 120_000)).toBe('done');
  expect(await page.locator('#scale-progress').evaluate((p) => (p as HTMLProgressElement).value)).toBe(1);
  await expect(page.locator('#scale-progress-text')).toContainText('Done: 2 sizes × 1 system');
  await expect(page.locator('#scale-progress-text')).toContainText('2 ok, 0 over budget, 0 failed, 0 skipped');

  await expect(page.locator('#scale-table tbody tr')).toHaveCount(2);
  const summary: string[] = [];
  for (const S of [16, 32]) {
    const cell = (metric: string) => page.locator(`#scale-table td[data-s="${S}"][data-system="engine"][data-metric="${metric}"]`);
    await expect(cell('ms')).toHaveAttribute('data-status', 'ok');
    const ms = Number(await cell('ms').textContent());
    const gflops = Number(await cell('gflops').textContent());
    summary.push(`S=${S}: ${ms} ms, ${gflops} GFLOP/s`);
    expect(ms, `median ms at S = ${S}`).toBeGreaterThan(0);
    expect(gflops, `GFLOP/s at S = ${S}`).toBeGreaterThan(0);
  }
  testInfo.annotations.push({ type: 'scaling', description: summary.join('; ') });
  await expect(page.locator('#scale-notes')).toHaveCount(0); // nothing failed or skipped

  for (const id of ['scale-chart-ms', 'scale-chart-gflops']) {
    await expect(page.locator(`#${id}`)).toBeVisible();
    const inked = await page.evaluate((canvasId) => {
      const canvas = document.getElementById(canvasId) as HTMLCanvasElement;
      const d = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
      return n;
    }, id);
    expect(inked, `#${id} is blank`).toBeGreaterThan(1000);
  }
  const shot = testInfo.outputPath('scaling.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('scaling (S = 16, 32, E=32 H=2, engine)', { path: shot, contentType: 'image/png' });

  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#scale-download')]);
  const file = testInfo.outputPath(download.suggestedFilename());
  await download.saveAs(file);
  await testInfo.attach('scaling JSON', { path: file, contentType: 'application/json' });
  const json = JSON.parse(readFileSync(file, 'utf8'));
  expect(json.backend).toBe('webgpu');
  expect(json.layer).toEqual({ batchSize: 1, embedDim: 32, numHeads: 2, isCausal: false });
  expect(json.seqLens).toEqual([16, 32]);
  expect(json.points.map((p: { seqLen: number }) => p.seqLen)).toEqual([16, 32]);
  for (const p of json.points) {
    expect(p.systems.engine.status).toBe('ok');
    expect(p.systems.engine.medianMs).toBeGreaterThan(0);
    expect(p.systems.engine.runsMs).toHaveLength(1);
  }

  // Stop: takes effect between sizes; the sizes after it are marked stopped, not dropped.
  await page.fill('#scale-s-list', '16, 32, 64, 128, 256, 512, 1024, 2048');
  await page.click('#scale-run');
  await page.click('#scale-stop');
  expect(await demo.settled('scaling', 120_000)).toBe('done');
  await expect(page.locator('#scale-progress-text')).toContainText('Stopped after S = ');
  await expect(page.locator('#scale-table tbody tr')).toHaveCount(8);
  await expect(page.locator('#scale-table td[data-s="16"][data-system="engine"][data-metric="ms"]')).toHaveAttribute('data-status', 'ok');
  await expect(page.locator('#scale-table td[data-s="2048"][data-system="engine"]')).toHaveAttribute('data-status', 'stopped');
  await expect(page.locator('#scale-stop')).toBeDisabled();
  await expect(page.locator('#scale-run')).toBeEnabled();
  await demo.expectClean(mark);
});

test('decode timeline: prefill 8, decode to maxSeqLen 64, a median ms per token and the last step matches one causal forward; Stop stops', async ({ demo }, testInfo) => {
  test.setTimeout(120_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#decode');
  await expect(panel).toHaveAttribute('data-state', 'idle');
  await expect(panel).toContainText('split-KV');
  const software = /swiftshader/i.test((await page.locator('#footer-backend').textContent()) ?? '');
  // The defaults show the switch to split-KV with many steps on either side of it.
  await expect(page.locator('#decode-max')).toHaveValue(software ? '768' : '2048');
  await expect(page.locator('#decode-prefill')).toHaveValue(software ? '256' : '16');
  await expect(page.locator('#decode-info')).toContainText(software ? '512 decode steps, 257 of them split-KV' : '2032 decode steps, 1537 of them split-KV');
  await expect(page.locator('#decode-stop')).toBeDisabled();
  await page.fill('#decode-max', '64');
  await expect(page.locator('#decode-preset')).toHaveValue('custom');
  await page.fill('#decode-prefill', '8');
  await expect(page.locator('#decode-info')).toContainText('56 decode steps');

  await page.click('#decode-run');
  expect(await demo.settled('decode', 100_000)).toBe('done');
  expect(await page.locator('#decode-progress').evaluate((p) => (p as HTMLProgressElement).value)).toBe(1);
  await expect(page.locator('#decode-progress-text')).toContainText('56 decode steps');
  await expect(page.locator('#decode-steps')).toHaveText('56');
  await expect(page.locator('#decode-range')).toHaveText('9 → 64');
  for (const id of ['decode-first', 'decode-median', 'decode-last', 'decode-tps']) {
    const v = Number(await page.locator(`#${id}`).textContent());
    expect(v, `#${id}`).toBeGreaterThan(0);
  }
  const maxDiff = Number(await page.locator('#decode-maxdiff').textContent());
  testInfo.annotations.push({ type: 'decode', description: `median ${await page.locator('#decode-median').textContent()} ms, max |diff| ${maxDiff}` });
  expect(maxDiff).toBeGreaterThanOrEqual(0);
  expect(maxDiff).toBeLessThan(1e-4);
  await expect(page.locator('#decode-verdict')).toHaveText('PASS');
  await expect(page.locator('#decode-chart')).toBeVisible();
  const inked = await page.evaluate(() => {
    const canvas = document.getElementById('decode-chart') as HTMLCanvasElement;
    const d = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  });
  expect(inked, 'the chart canvas is blank').toBeGreaterThan(1000);
  const shot = testInfo.outputPath('decode.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('decode timeline (maxSeqLen 64, prefill 8)', { path: shot, contentType: 'image/png' });

  // Stop: a long run, stopped after a few steps, still reports and checks what it decoded.
  await page.fill('#decode-max', '2048');
  await expect(page.locator('#decode-preset')).toHaveValue('2048');
  await page.click('#decode-run');
  await page.waitForFunction(() => (document.getElementById('decode-progress') as HTMLProgressElement).value > 0);
  await page.click('#decode-stop');
  expect(await demo.settled('decode', 60_000)).toBe('done');
  await expect(page.locator('#decode-progress-text')).toContainText('Stopped after');
  await expect(page.locator('#decode-table')).toContainText('all steps (stopped)');
  await expect(page.locator('#decode-check')).toContainText('PASS');
  expect(Number(await page.locator('#decode-maxdiff').textContent())).toBeLessThan(1e-4);
  await expect(page.locator('#decode-stop')).toBeDisabled();
  await expect(page.locator('#decode-run')).toBeEnabled();
  await demo.expectClean(mark);
});

test("decode timeline: a q8_0 cache holds 0.53× an f16 cache's memory; paged, 3 sequences stepped in one call match their causal forwards", async ({ demo }) => {
  test.setTimeout(120_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.fill('#decode-e', '256');
  await page.fill('#decode-h', '4');
  await page.fill('#decode-g', '2');
  await page.fill('#decode-b', '1');
  await page.fill('#decode-max', '40');
  await page.fill('#decode-prefill', '8');
  await page.selectOption('#decode-dtype', 'q8_0');
  await expect(page.locator('#decode-info')).toContainText('as q8_0');
  await page.click('#decode-run');
  expect(await demo.settled('decode', 100_000)).toBe('done');
  // Dh 64: two blocks of 34 bytes a row against 128 bytes of f16.
  await expect(page.locator('#decode-memory-ratio')).toHaveText('0.53×');
  await expect(page.locator('#decode-verdict')).toHaveText('Q8_0');
  const rounded = Number(await page.locator('#decode-maxdiff').textContent());
  expect(Number.isFinite(rounded) && rounded > 0 && rounded < 0.05, `q8_0's difference ${rounded}`).toBe(true);

  // Paged: 3 sequences of a PagedKvCache, one call a step; each one's last step against its causal forward.
  await page.selectOption('#decode-dtype', '');
  await page.fill('#decode-b', '3');
  await page.check('#decode-paged');
  await expect(page.locator('#decode-info')).toContainText('3 sequences in blocks of 16 (one call a step)');
  await page.click('#decode-run');
  expect(await demo.settled('decode', 100_000)).toBe('done');
  await expect(page.locator('#decode-prefill-time')).toContainText('one paged call');
  await expect(page.locator('#decode-steps')).toHaveText('32');
  await expect(page.locator('#decode-verdict')).toHaveText('PASS');
  expect(Number(await page.locator('#decode-maxdiff').textContent())).toBeLessThan(1e-4);
  await page.uncheck('#decode-paged');
  await demo.expectClean(mark);
});

test('no console errors, page errors or uncaptured WebGPU errors over the whole session', async ({ demo }) => {
  await demo.expectClean(0);
  await expect(demo.page.locator('#gpu-errors')).toHaveAttribute('data-count', '0');
});
