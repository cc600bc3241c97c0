// The demo's benchmark panel with the systems on the CPU: this engine's 'wasm' backend (1 thread and
// its default threads), ONNX Runtime Web's WASM EP and TensorFlow.js's WASM backend, beside this
// engine on WebGPU, at the small preset in Chromium. Each must load (its .wasm served by the dev
// server, nothing fetched from elsewhere), pass the runner's gate against the float64 reference and
// report a median. One shared page (./demo-page.ts), which must stay clean.

import { expect } from '@playwright/test';
import { test } from './demo-page.ts';

// The worker's page is shared across spec files: start this file from a freshly loaded page.
test.beforeAll(async ({ demo }, testInfo) => {
  testInfo.setTimeout(120_000);
  await demo.fresh();
});

const WASM_SYSTEMS = ['wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm'];

test('benchmark: the WASM systems beside the engine at s128-e256: each ok, gated, with a positive median', async ({ demo }, testInfo) => {
  test.setTimeout(240_000);
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const origin = new URL(page.url()).origin;
  const requests: string[] = [];
  const onRequest = (r: { url(): string }) => requests.push(r.url());
  page.on('request', onRequest);
  try {
    await page.selectOption('#bench-preset', 's128-e256');
    await page.fill('#bench-warmup', '1');
    await page.fill('#bench-runs', '3');
    const chosen = ['engine', ...WASM_SYSTEMS];
    const ids = await page.locator('#benchmark fieldset.systems [data-system]').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.system!));
    for (const id of chosen) expect(ids, `the panel lists ${id}`).toContain(id);
    // Ticked on a fresh page: every system but TensorFlow.js's WASM backend (the slowest CPU system, one more download).
    for (const id of ids) {
      const box = expect(page.locator(`#bench-sys-${id}`));
      if (id === 'tfjs-wasm') await box.not.toBeChecked();
      else await box.toBeChecked();
    }
    for (const id of ids) await (chosen.includes(id) ? page.check(`#bench-sys-${id}`) : page.uncheck(`#bench-sys-${id}`));

    await page.click('#bench-run');
    expect(await demo.settled('benchmark', 220_000)).toBe('done');
    await expect(page.locator('#bench-table tbody tr')).toHaveCount(chosen.length);
    const summary: string[] = [];
    for (const id of chosen) {
      const row = page.locator(`#bench-table tr[data-system="${id}"]`);
      const cells = await row.locator('td').allTextContents();
      summary.push(`${id}: ${cells.join(' | ')}`);
      expect(await row.getAttribute('data-status'), `${id}: ${cells.join(' | ')}`).toBe('ok');
      expect(Number(cells[2]), `median ms of ${id}`).toBeGreaterThan(0);
      expect(Number(cells[5]), `max |err| of ${id} (gated against the float64 reference)`).toBeLessThan(1e-3);
    }
    testInfo.annotations.push({ type: 'benchmark', description: summary.join('\n') });
    await expect(page.locator('#bench-table tr[data-system="wasm"] td').first()).toContainText('1 thread');
    await expect(page.locator('#bench-table tr[data-system="ort-wasm"] td').first()).toContainText('WASM, 1 thread');
    await expect(page.locator('#bench-table tr[data-system="tfjs-wasm"] td').first()).toContainText('WASM, 1 thread');
    // What the page says of its threads: a count, and why when it is 1 (engine.threadsNote).
    await expect(page.locator('#bench-table tr[data-system="wasm-threads"] td').first()).toContainText(/\(\d+ threads?/);
  } finally {
    page.off('request', onRequest);
  }
  // Every .wasm came from the dev server (ONNX Runtime Web's and TensorFlow.js's, through `?url`).
  const wasm = requests.filter((u) => /\.wasm(\?|$)/.test(u));
  expect(
    wasm.some((u) => u.includes('ort-wasm-simd-threaded.wasm')),
    `ORT's .wasm requested: ${wasm.join(', ')}`,
  ).toBe(true);
  expect(
    wasm.some((u) => u.includes('tfjs-backend-wasm')),
    `TF.js's .wasm requested: ${wasm.join(', ')}`,
  ).toBe(true);
  const elsewhere = requests.filter((u) => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:'));
  expect(elsewhere, 'requests to anywhere but the dev server').toEqual([]);
  await demo.expectClean(mark);
});
