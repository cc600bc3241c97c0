// The demo's layout at the widths people use: 1280 and 1080 px (a laptop; the benchmark table must
// fit its panel) and 390 px (a phone; nothing may make the page wider than the screen). Each panel
// that had a layout fault is run and kept as a screenshot (test artefacts, checked by eye).

import { expect, type Page, type TestInfo } from '@playwright/test';
import { test } from './demo-page.ts';

// The worker's page is shared across spec files: start this file from a freshly loaded page.
test.beforeAll(async ({ demo }, testInfo) => {
  testInfo.setTimeout(120_000);
  await demo.fresh();
});

const FIXTURE = new URL('../test/fixtures/weights/gpt2_attention.safetensors', import.meta.url).pathname;

/**
 * Where the page gets wider than the viewport: each element that reaches past its right edge while
 * its parent does not (outside any box that scrolls or clips), with its panel.
 */
async function overflowing(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    const past = (el: Element | null) => !!el && el.getBoundingClientRect().right > width + 0.5;
    const clipped = (el: Element): boolean => {
      for (let p = el.parentElement; p; p = p.parentElement) if (getComputedStyle(p).overflowX !== 'visible') return true;
      return false;
    };
    return Array.from(document.querySelectorAll('body *'))
      .filter((el) => past(el) && !past(el.parentElement) && !clipped(el))
      .map((el) => {
        const r = el.getBoundingClientRect();
        const cls = typeof el.className === 'string' && el.className ? `.${el.className.trim().split(/\s+/).join('.')}` : '';
        return `#${el.closest('section')?.id ?? '?'} ${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${cls}: right ${Math.round(r.right)}, width ${Math.round(r.width)}`;
      });
  });
}

async function keep(page: Page, testInfo: TestInfo, selector: string, name: string): Promise<void> {
  const path = testInfo.outputPath(`${name}.png`);
  await page.locator(selector).screenshot({ path });
  await testInfo.attach(name, { path, contentType: 'image/png' });
}

test('at 1280 and 1080 px: the benchmark table fits its panel, the chart shows whole labels; the decode defaults show the split-KV switch', async ({
  demo,
}, testInfo) => {
  test.setTimeout(420_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.setViewportSize({ width: 1280, height: 900 });

  // The benchmark with every system (the long labels), tiny preset.
  await test.step('benchmark', async () => {
    await page.selectOption('#bench-preset', 'tiny');
    await page.fill('#bench-warmup', '0');
    await page.fill('#bench-runs', '1');
    for (const id of ['engine', 'naive', 'tfjs', 'ort', 'wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm', 'cpu']) await page.check(`#bench-sys-${id}`);
    await page.click('#bench-run');
    expect(await demo.settled('benchmark', 240_000)).toBe('done');
    for (const width of [1280, 1080]) {
      await page.setViewportSize({ width, height: 900 });
      const fit = await page.evaluate(() => {
        const table = document.getElementById('bench-table')!;
        const panel = document.getElementById('benchmark')!;
        const last = table.querySelector('thead th:last-child')!;
        return { table: table.getBoundingClientRect().right, panel: panel.getBoundingClientRect().right, lastColumn: last.getBoundingClientRect().width };
      });
      expect(fit.table, `the table's right edge inside the panel at ${width} px`).toBeLessThanOrEqual(fit.panel);
      expect(fit.lastColumn, `the notes column at ${width} px is wide enough for a phrase, not a word per line`).toBeGreaterThan(200);
      await keep(page, testInfo, '#benchmark', `benchmark-${width}`);
    }
  });
  await page.setViewportSize({ width: 1280, height: 900 });

  // The scaling chart, a small run.
  await test.step('scaling', async () => {
    await page.fill('#scale-s-list', '128, 256, 512, 1024, 2048'); // the software default list: the longest tick labels
    await page.fill('#scale-e', '32');
    await page.fill('#scale-h', '2');
    await page.fill('#scale-warmup', '0');
    await page.fill('#scale-runs', '1');
    await page.uncheck('#scale-sys-tfjs');
    await page.click('#scale-run');
    expect(await demo.settled('scaling', 120_000)).toBe('done');
    await keep(page, testInfo, '#scaling', 'scaling-1280');
  });

  // The decode timeline's default run: both kinds of step, many of each.
  await test.step('decode', async () => {
    await page.click('#decode-run');
    expect(await demo.settled('decode', 240_000)).toBe('done');
    const kinds = await page.evaluate(() => {
      const text = document.getElementById('decode-summary')!.textContent ?? '';
      return text;
    });
    expect(kinds).toContain('split-KV');
    await keep(page, testInfo, '#decode', 'decode-default-1280');
  });
  await demo.expectClean(mark);
});

test('at 390 px the page is no wider than the screen; the panels as a phone shows them', async ({ demo }, testInfo) => {
  test.setTimeout(120_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  await page.setInputFiles('#own-file', FIXTURE);
  expect(await demo.settled('load-weights')).toBe('done');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForFunction(() => document.documentElement.clientWidth === 390);
  const offenders = await overflowing(page);
  const pageWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(pageWidth, `the page is ${pageWidth} px wide at 390 px; past the edge:\n${offenders.join('\n')}`).toBeLessThanOrEqual(390);
  for (const id of ['adapter', 'shape-flow', 'attention-maps', 'load-weights', 'benchmark', 'scaling', 'decode']) await keep(page, testInfo, `#${id}`, `${id}-390`);
  await page.setViewportSize({ width: 1280, height: 900 });
  await keep(page, testInfo, '#attention-maps', 'attention-maps-1280');
  await keep(page, testInfo, '#load-weights', 'load-weights-1280');
  await demo.expectClean(mark);
});
