// The demo's Load-your-own panel and the attention maps' colour scale and hover, driven through their
// controls on one shared page (./demo-page.ts), which must stay clean.

import { expect } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { parseSafetensors } from '../src/weights/safetensors.ts';
import { writeSafetensors } from '../test/helpers/safetensors.ts';
import { test } from './demo-page.ts';

// The worker's page is shared across spec files: start this file from a freshly loaded page.
test.beforeAll(async ({ demo }, testInfo) => {
  testInfo.setTimeout(120_000);
  await demo.fresh();
});

const FIXTURES = new URL('../test/fixtures/weights/', import.meta.url);

test('load your own: a .safetensors file through the picker fills a layer and shows its maps', async ({ demo }, testInfo) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#load-weights');
  await expect(panel).toHaveAttribute('data-state', 'idle');

  // GPT-2 names: the layer is found under "h.0.", E read from the file, H suggested, causal.
  await page.setInputFiles('#own-file', new URL('gpt2_attention.safetensors', FIXTURES).pathname);
  expect(await demo.settled('load-weights')).toBe('done');
  await expect(page.locator('#own-layer option').first()).toHaveText('gpt2 · h.0. · E 32');
  await expect(page.locator('#own-causal')).toBeChecked();
  await expect(page.locator('#own-summary')).toContainText('embedDim 32, numHeads 4 (Dh 8), numKvHeads 4, bias true');
  await expect(panel.locator('figure.head')).toHaveCount(4);
  const diff = Number(await page.locator('#own-check').getAttribute('data-max-diff'));
  expect(diff, 'engine vs float64 reference on the loaded layer').toBeLessThan(1e-4);
  const shot = testInfo.outputPath('load-your-own-gpt2.png');
  await panel.screenshot({ path: shot });
  await testInfo.attach('load your own: gpt2_attention.safetensors', { path: shot, contentType: 'image/png' });

  // A head count that does not divide E: the library's error, shown in the panel.
  await page.fill('#own-heads', '5');
  await page.click('#own-run');
  expect(await demo.settled('load-weights')).toBe('error');
  await expect(page.locator('#own-error')).toContainText('a divisor of embedDim 32');

  // Other names: BERT's tensors renamed, read as layout 'bert' through a typed name map.
  const bert = parseSafetensors(new Uint8Array(readFileSync(new URL('bert_attention.safetensors', FIXTURES))));
  const map: Record<string, string> = {};
  const tensors: Record<string, { shape: number[]; data: Float32Array }> = {};
  for (const [i, part] of ['query', 'key', 'value'].entries()) {
    for (const kind of ['weight', 'bias']) {
      const from = `attention.self.${part}.${kind}`;
      map[from] = `blocks.0.attn.${'qkv'[i]}.${kind}`;
      tensors[map[from]] = bert.get(`bert.encoder.layer.0.${from}`)!;
    }
  }
  for (const kind of ['weight', 'bias']) {
    map[`attention.output.dense.${kind}`] = `blocks.0.attn.o.${kind}`;
    tensors[`blocks.0.attn.o.${kind}`] = bert.get(`bert.encoder.layer.0.attention.output.dense.${kind}`)!;
  }
  await page.setInputFiles('#own-file', { name: 'renamed.safetensors', mimeType: 'application/octet-stream', buffer: Buffer.from(writeSafetensors(tensors)) });
  expect(await demo.settled('load-weights')).toBe('error'); // no layout's names: nothing found yet
  await expect(page.locator('#own-layer')).toHaveValue('custom');
  await page.selectOption('#own-layout', 'bert');
  await page.fill('#own-prefix', '');
  await page.fill('#own-heads', '4');
  await page.fill(
    '#own-names',
    Object.entries(map)
      .map(([k, v]) => `${k} = ${v}`)
      .join('\n'),
  );
  await page.uncheck('#own-causal');
  await page.click('#own-run');
  expect(await demo.settled('load-weights')).toBe('done');
  await expect(page.locator('#own-summary')).toContainText('8 names mapped');
  await expect(page.locator('#own-summary')).toContainText('embedDim 32, numHeads 4');
  await expect(panel.locator('figure.head')).toHaveCount(4);
  expect(Number(await page.locator('#own-check').getAttribute('data-max-diff'))).toBeLessThan(1e-4);
  await demo.expectClean(mark);
});

test("attention maps: a colour scale with its values, hover names query, key and probability, one scale or each head's own", async ({ demo }, testInfo) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#attention-maps');
  await page.selectOption('#maps-sentence', 'en');
  await page.selectOption('#maps-heads', '2');
  await page.check('#maps-linear');
  await expect(panel.locator('figure.head[data-linear]')).toHaveCount(2);
  expect(await demo.settled('attention-maps')).toBe('done');

  // Each head's own scale: one under every map (softmax and linear), its top value the map's largest.
  await expect(page.locator('#maps-scale')).toHaveValue('head');
  await expect(panel.locator('figure.head .colour-scale')).toHaveCount(4);
  const own = await panel
    .locator('figure.head')
    .evaluateAll((els) =>
      els.map((e) => ({ canvas: Number(e.querySelector('canvas')!.dataset.max), scale: Number((e.querySelector('.colour-scale') as HTMLElement).dataset.max) })),
    );
  for (const m of own) expect(m.scale).toBe(m.canvas);
  expect(new Set(own.map((m) => m.canvas)).size, 'each map has its own maximum').toBeGreaterThan(1);
  const ticks = await panel.locator('figure.head').first().locator('.colour-scale-ticks span').allTextContents();
  expect(ticks).toHaveLength(5);
  expect(ticks[0]).toBe('0');
  expect(Number(ticks[4])).toBeCloseTo(own[0].canvas, 3);

  // Hover: the cell under the pointer. English sentence: 10 tokens; query 2 ("sat"), key 1 ("cat").
  const canvas = panel.locator('figure.head:not([data-linear]) canvas').first();
  const cell = await canvas.evaluate((c) => {
    const r = c.getBoundingClientRect();
    return { width: r.width, height: r.height };
  });
  // Geometry as drawn: the grid's bottom edge is 4 px above the canvas's; S = 10 cells of 30 px (300 / S).
  const size = 30;
  const gridTop = cell.height - 4 - 10 * size;
  const gridLeft = cell.width - 10 - 70 - 40 - 10 * size;
  await canvas.hover({ position: { x: gridLeft + 1 * size + size / 2, y: gridTop + 2 * size + size / 2 } });
  const tip = page.locator('#maps-tip');
  await expect(tip).toBeVisible();
  await expect(tip).toContainText('query sat (2)');
  await expect(tip).toContainText('key cat (1)');
  await expect(tip).toContainText('p = ');
  // The viewport as it is (a panel screenshot would scroll, moving the map from under the pointer).
  const hoverShot = testInfo.outputPath('attention-maps-hover.png');
  const figure = (await panel.locator('figure.head').first().boundingBox())!;
  await page.screenshot({ path: hoverShot, clip: { x: figure.x, y: figure.y, width: figure.width + 160, height: figure.height } });
  await testInfo.attach("attention maps: hover on (sat, cat), each head's own scale", { path: hoverShot, contentType: 'image/png' });
  const p = Number(await tip.getAttribute('data-probability'));
  expect(p).toBeGreaterThan(0);
  expect(p).toBeLessThanOrEqual(1);
  // Off the grid, the tip goes.
  await canvas.hover({ position: { x: 2, y: 2 } });
  await expect(tip).toBeHidden();

  // One scale for all: a single legend above the maps, every map drawn up to the same value, the largest.
  await page.selectOption('#maps-scale', 'shared');
  // The change starts a new drawing: wait for what it draws (auto-waiting), then for the panel to settle
  // (a settled() right after the change could still see the state of the drawing before it).
  await expect(page.locator('#maps-legend .colour-scale')).toHaveCount(1);
  await expect(panel.locator('figure.head .colour-scale')).toHaveCount(0);
  expect(await demo.settled('attention-maps')).toBe('done');
  const shared = Number(await page.locator('#maps-legend .colour-scale').getAttribute('data-max'));
  const maxes = await panel.locator('figure.head canvas').evaluateAll((els) => els.map((e) => Number((e as HTMLElement).dataset.max)));
  expect(maxes).toEqual(Array(4).fill(shared));
  expect(shared).toBe(Math.max(...own.map((m) => m.canvas)));
  await page.selectOption('#maps-scale', 'head');
  await page.uncheck('#maps-linear');
  expect(await demo.settled('attention-maps')).toBe('done');
  await demo.expectClean(mark);
});
