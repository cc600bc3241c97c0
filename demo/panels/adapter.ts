// Adapter panel: what WebGPU gives this page (navigator.gpu.requestAdapter()), and which backend the
// engine chose. When there is no WebGPU, it says so plainly: the engine then runs on its CPU backend.

import type { AttentionEngine } from 'webgpu-attention';
import { bytes, errorMessage, grouped, h, setState } from './dom.ts';

const KEY_LIMITS: { name: keyof GPUSupportedLimits; bytes?: boolean }[] = [
  { name: 'maxBufferSize', bytes: true },
  { name: 'maxStorageBufferBindingSize', bytes: true },
  { name: 'maxComputeWorkgroupStorageSize', bytes: true },
  { name: 'maxComputeInvocationsPerWorkgroup' },
  { name: 'maxComputeWorkgroupSizeX' },
  { name: 'maxComputeWorkgroupSizeY' },
  { name: 'maxComputeWorkgroupSizeZ' },
  { name: 'maxComputeWorkgroupsPerDimension' },
  { name: 'maxStorageBuffersPerShaderStage' },
];

/** A software adapter (SwiftShader and the like) or the CPU backend: panels keep their default runs short there. */
export function isSoftware(engine: AttentionEngine): boolean {
  if (engine.backend !== 'webgpu') return true;
  const info = engine.adapterInfo;
  return !info || /swiftshader|llvmpipe|lavapipe|software|warp/i.test(`${info.vendor} ${info.architecture} ${info.device} ${info.description}`);
}

function row(name: string, value: Node | string, id?: string) {
  return h('tr', {}, h('th', { scope: 'row' }, name), h('td', { id }, value));
}

export async function mountAdapterPanel(section: HTMLElement, engine: AttentionEngine): Promise<void> {
  setState(section, 'running');
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const backend = engine.backend;

  const status =
    backend === 'webgpu'
      ? h('p', { class: 'note ok', id: 'backend-status' }, 'The engine runs on ', h('strong', {}, 'WebGPU'), '.')
      : h(
          'div',
          { class: 'note warn', id: 'backend-status' },
          h(
            'p',
            {},
            h('strong', {}, 'WebGPU is not available here: the engine uses its CPU fallback'),
            ' (the float64 JavaScript reference). Every panel still works, slowly; the WebGPU systems of the benchmark report failure.',
          ),
          h('p', {}, 'Reason: ', h('code', {}, engine.fallbackReason ?? 'unknown')),
        );

  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  let adapter: GPUAdapter | null = null;
  let adapterError: string | null = null;
  if (gpu) {
    try {
      adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
      if (!adapter) adapterError = 'navigator.gpu.requestAdapter() resolved null (no adapter).';
    } catch (e) {
      adapterError = `navigator.gpu.requestAdapter() threw: ${errorMessage(e)}`;
    }
  } else {
    adapterError = window.isSecureContext
      ? 'navigator.gpu is missing: this browser has no WebGPU (on Linux, Chromium needs --enable-unsafe-webgpu).'
      : 'navigator.gpu is missing: this page is not a secure context (serve it from https, localhost or 127.0.0.1).';
  }

  const table = h('table', { class: 'kv' });
  const tbody = h('tbody');
  table.append(tbody);
  tbody.append(row('engine backend', h('span', { class: `badge ${backend === 'webgpu' ? 'pass' : 'fail'}` }, backend), 'engine-backend'));
  const info = adapter?.info ?? null;
  const engineInfo = engine.adapterInfo;
  for (const key of ['vendor', 'architecture', 'device', 'description'] as const) {
    const value = info?.[key] || engineInfo?.[key] || '';
    tbody.append(row(key, value ? value : h('span', { class: 'muted' }, '(not reported)')));
  }
  if (info && 'isFallbackAdapter' in info) {
    tbody.append(row('fallback adapter', String((info as GPUAdapterInfo & { isFallbackAdapter: boolean }).isFallbackAdapter)));
  }

  const parts: Node[] = [status, h('div', { class: 'columns' }, h('div', {}, h('h3', {}, 'Adapter'), table))];
  if (adapterError) parts.push(h('p', { class: 'note warn' }, adapterError));
  if (info && (info as GPUAdapterInfo & { isFallbackAdapter?: boolean }).isFallbackAdapter) {
    parts.push(
      h(
        'p',
        { class: 'note warn', id: 'adapter-software' },
        'This is a fallback adapter: WebGPU implemented in software on the CPU (SwiftShader in Chromium). Everything runs, but timings say nothing about a GPU.',
      ),
    );
  }
  if (adapter) {
    const features = [...adapter.features].sort();
    const limits = h(
      'table',
      { class: 'kv' },
      h(
        'tbody',
        {},
        ...KEY_LIMITS.map(({ name, bytes: isBytes }) => {
          const v = Number(adapter!.limits[name]);
          return row(name, isBytes ? `${bytes(v)} (${grouped(v)})` : grouped(v));
        }),
      ),
    );
    const columns = parts[1] as HTMLElement;
    columns.append(h('div', {}, h('h3', {}, 'Key limits'), limits));
    parts.push(
      h('h3', {}, `Features (${features.length})`),
      h('ul', { class: 'chips', id: 'adapter-features' }, ...(features.length ? features.map((f) => h('li', {}, f)) : [h('li', { class: 'muted' }, 'none')])),
    );
  }
  body.replaceChildren(...parts);
  setState(section, 'done');
}
