// The demo page: makes the engine (WebGPU, or the CPU fallback), watches its device for errors, and
// mounts the panels. Every panel reports its state in data-state (idle | running | done | error);
// <body data-ready="true"> once everything has mounted and the first renders are done.

import type { AttentionEngine } from 'webgpu-attention';
import { benchSystems } from './bench/registry.ts';
import { sharedEngine } from './bench/systems/engine.ts';
import { mountAdapterPanel } from './panels/adapter.ts';
import { mountAttentionMapsPanel } from './panels/attention-maps.ts';
import { mountBenchmarkPanel } from './panels/benchmark.ts';
import { mountCorrectnessPanel } from './panels/correctness.ts';
import { mountDecodePanel } from './panels/decode.ts';
import { mountLoadWeightsPanel } from './panels/load-weights.ts';
import { errorMessage, h } from './panels/dom.ts';
import { mountRealModelPanel } from './panels/real-model.ts';
import { mountScalingPanel } from './panels/scaling.ts';
import { LayerConfig } from './panels/layer-config.ts';
import { mountShapeFlowPanel } from './panels/shape-flow.ts';

const $ = (id: string) => document.getElementById(id)!;

/** Shows a WebGPU (or other) error in the page, at the top. */
function showError(message: string): void {
  const box = $('gpu-errors');
  $('gpu-error-list').append(h('li', {}, message));
  box.hidden = false;
  box.dataset.count = String(Number(box.dataset.count ?? 0) + 1);
}

function watchDevice(engine: AttentionEngine): void {
  const device = engine.device;
  if (!device) return;
  device.addEventListener('uncapturederror', (ev) => {
    const error = (ev as GPUUncapturedErrorEvent).error;
    showError(`uncaptured ${error.constructor.name}: ${error.message}`);
  });
  // The page never disposes its engine, so a lost device is always an error worth showing.
  void device.lost.then((info) => showError(`device lost (${info.reason}): ${info.message}`));
}

async function main(): Promise<void> {
  const boot = $('boot-status');
  let engine: AttentionEngine;
  try {
    engine = await sharedEngine();
  } catch (e) {
    boot.textContent = `The engine could not start: ${errorMessage(e)}`;
    boot.className = 'note error';
    return;
  }
  watchDevice(engine);
  document.body.dataset.backend = engine.backend;
  $('footer-backend').textContent =
    `backend: ${engine.backend}${engine.adapterInfo ? ` · ${engine.adapterInfo.vendor} ${engine.adapterInfo.architecture}`.trimEnd() : ''}`;
  boot.remove();

  const panel = (id: string) => $(id) as HTMLElement;
  const adapterDone = mountAdapterPanel(panel('adapter'), engine);

  const config = new LayerConfig();
  panel('layer').querySelector('.panel-body')!.append(config.element);
  const correctness = mountCorrectnessPanel(panel('correctness'), engine, config);
  mountShapeFlowPanel(panel('shape-flow'), config);
  const maps = mountAttentionMapsPanel(panel('attention-maps'), engine);
  mountLoadWeightsPanel(panel('load-weights'), engine);
  mountRealModelPanel(panel('real-model'), engine); // runs on request: its model is 28 MB

  const systems = await benchSystems();
  mountBenchmarkPanel(panel('benchmark'), engine, systems);
  mountScalingPanel(panel('scaling'), engine, systems);
  mountDecodePanel(panel('decode'), engine);

  await adapterDone;
  await maps.render();
  await correctness.run();
  document.body.dataset.ready = 'true';
}

void main().catch((e) => {
  showError(`the page failed to start: ${errorMessage(e)}`);
  throw e;
});
