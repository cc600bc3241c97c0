// The demo's Load-your-own panel with model files: a GGUF file and a Hugging Face checkpoint folder
// (config.json + two .safetensors shards + their index), through the panel's inputs; the layer list
// and the maps drawn, checked against the float64 reference; a checkpoint without config.json refused
// in the panel.

import { expect } from '@playwright/test';
import { fileURLToPath } from 'node:url';
import { test } from './demo-page.ts';

test.beforeAll(async ({ demo }, testInfo) => {
  testInfo.setTimeout(120_000);
  await demo.fresh();
});

const fixture = (p: string) => fileURLToPath(new URL(`../test/fixtures/${p}`, import.meta.url));

test('load your own: a Hugging Face checkpoint folder and a GGUF file list their layers and draw one', async ({ demo }) => {
  await demo.requireWebGPU();
  const { page } = demo;
  const mark = demo.mark();
  const panel = page.locator('#load-weights');

  // Gemma 3 (text), sharded in two files: 5 sliding layers (window 8) then a full one; 4 heads / 2 KV of 16.
  await page.setInputFiles('#own-folder', fixture('hf-models/gemma3'));
  expect(await demo.settled('load-weights')).toBe('done');
  await expect(panel.locator('#own-model-layers tr[data-layer]')).toHaveCount(6);
  await expect(page.locator('#own-layer option').first()).toHaveText('layer 0 · sliding (window 8) · rope · 4 heads / 2 KV · head size 16');
  await expect(page.locator('#own-layer option').nth(5)).toHaveText('layer 5 · full · rope · 4 heads / 2 KV · head size 16');
  await expect(panel.locator('figure.head')).toHaveCount(4);
  await expect(page.locator('#own-summary')).toContainText('window 8');
  expect(Number(await page.locator('#own-check').getAttribute('data-max-diff'))).toBeLessThan(1e-4);
  await page.selectOption('#own-layer', '5');
  expect(await demo.settled('load-weights')).toBe('done');
  await expect(page.locator('#own-summary')).toContainText('5 of 6 (gemma3_text): layer 5 · full');

  // The shards without config.json: refused in the panel with the reason.
  await page.setInputFiles('#own-file', [fixture('hf-models/gemma3/model-00001-of-00002.safetensors'), fixture('hf-models/gemma3/model-00002-of-00002.safetensors')]);
  expect(await demo.settled('load-weights')).toBe('error');
  await expect(page.locator('#own-error')).toContainText('Missing config.json');

  // A SmolLM3 GGUF: every 4th layer without rope (NoPE), listed so. The fixture holds blocks 2 and 3
  // only (the header says 4): the first layer it picks is refused in the panel, naming the tensor.
  await page.setInputFiles('#own-file', fixture('gguf-families/smollm3.f32.gguf'));
  expect(await demo.settled('load-weights')).toBe('error');
  await expect(page.locator('#own-error')).toContainText('blk.0.attn_q.weight');
  await expect(panel.locator('#own-model-layers')).toContainText('NoPE');
  await expect(page.locator('#own-layer option').nth(3)).toContainText('NoPE');
  await page.selectOption('#own-layer', '3');
  expect(await demo.settled('load-weights')).toBe('done');
  await expect(panel.locator('figure.head').first()).toBeVisible();
  expect(Number(await page.locator('#own-check').getAttribute('data-max-diff'))).toBeLessThan(1e-4);
  await demo.expectClean(mark);
});
