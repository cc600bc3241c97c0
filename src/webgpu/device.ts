// Finding a WebGPU device: `navigator.gpu` in a browser, the `webgpu` npm package (Dawn) in Node.
// The caller does nothing in either case.

import { WebGPUUnavailableError } from '../errors.ts';
import { importNodeOnly } from '../node-only.ts';
import type { AdapterInfo } from '../types.ts';
import type { BufferPool } from './buffers.ts';
import type { AdapterKind } from './variant-record.ts';

export interface AcquiredDevice {
  device: GPUDevice;
  adapterInfo: { vendor: string; architecture: string; device: string; description: string };
  /** The adapter says it is a fallback (software) adapter: GPUAdapterInfo.isFallbackAdapter, or the older GPUAdapter.isFallbackAdapter. */
  isFallbackAdapter: boolean;
}

// The Dawn package a Node user installs next to this one: package.json's peerDependencies.webgpu
// (optional, so browser apps never download it); test/node-setup.test.ts keeps the two equal.
export const DAWN_PACKAGE = 'webgpu@0.6.2';

// Dawn's GPU object must outlive its adapters and devices, so it is kept here once created.
let nodeGpu: GPU | null = null;
let nodeGpuError: string | null = null;

async function findGpu(): Promise<{ gpu: GPU | null; why: string }> {
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav?.gpu) return { gpu: nav.gpu, why: '' };
  const isNode = typeof process !== 'undefined' && !!process.versions?.node;
  if (!isNode) {
    return {
      gpu: null,
      why: 'this browser has no navigator.gpu (WebGPU needs a secure context: https, localhost or 127.0.0.1; on Linux Chromium also needs --enable-unsafe-webgpu)',
    };
  }
  if (!nodeGpu && !nodeGpuError) {
    try {
      const mod = (await importNodeOnly('webgpu')) as { create: (flags: string[]) => GPU };
      nodeGpu = mod.create([]);
    } catch (e) {
      nodeGpuError = `the "webgpu" npm package (Dawn) could not be loaded: ${(e as Error).message}. In Node, install it beside webgpu-attention: npm install ${DAWN_PACKAGE}`;
    }
  }
  return { gpu: nodeGpu, why: nodeGpuError ?? '' };
}

/** What to do when there is no adapter: the step for this browser, or for the platform Node runs on. */
function noAdapterHelp(): string {
  const isNode = typeof process !== 'undefined' && !!process.versions?.node;
  if (!isNode) return 'The browser has WebGPU but no adapter: check chrome://gpu (on Linux Chromium needs --enable-unsafe-webgpu).';
  switch (process.platform) {
    case 'darwin':
      return 'Dawn uses Metal on macOS, which needs nothing installed; a Mac without a Metal GPU (some virtual machines) has no adapter.';
    case 'win32':
      return 'Dawn uses Direct3D 12 on Windows: update the GPU driver (a virtual machine may have none with D3D12).';
    default:
      return (
        "Dawn found no usable Vulkan driver. On Debian or Ubuntu install a GPU driver with Vulkan, or Mesa's software " +
        "driver (lavapipe): sudo apt-get install mesa-vulkan-drivers. Debian 12's own Mesa 22 is too old for Dawn: there " +
        'run sudo apt-get install -t bookworm-backports mesa-vulkan-drivers.'
      );
  }
}

/**
 * The WebGPU implementation when it compiles a pipeline on the thread that serves the device's calls,
 * else null. wgpu does (Firefox, Deno): its createComputePipelineAsync compiles before it returns (Deno:
 * the JavaScript thread is blocked for the compile) or before the device's next work (Firefox's GPU
 * process: a readback started after a 40 ms compile took 46–51 ms, against 9 alone), measured by
 * scripts/deno-compile-lag.ts and scripts/firefox-compile-lag.ts. Dawn (Chromium, Node's webgpu package)
 * compiles on threads of its own. Told by the runtime, as nothing in WebGPU's API says it.
 */
export function compilesInLine(): string | null {
  const g = globalThis as { Deno?: { version?: { deno?: string } }; navigator?: { userAgent?: string } };
  if (g.Deno?.version?.deno) return `wgpu (Deno ${g.Deno.version.deno})`;
  const ua = g.navigator?.userAgent ?? '';
  const firefox = /\bFirefox\/(\d+)/.exec(ua);
  if (firefox) return `wgpu (Firefox ${firefox[1]})`;
  return null;
}

/** Requests an adapter and a device with the limits this engine uses raised to what the adapter allows. */
export async function acquireDevice(): Promise<AcquiredDevice> {
  const { gpu, why } = await findGpu();
  if (!gpu) throw new WebGPUUnavailableError(`No WebGPU: ${why}`);
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) throw new WebGPUUnavailableError(`No WebGPU adapter: requestAdapter() returned null. ${noAdapterHelp()}`);
  const l = adapter.limits;
  const device = await adapter.requestDevice({
    label: 'AttentionEngine.device',
    // shader-f16 where the adapter has it: createAttentionEngine({ precision: 'f16' }) needs it.
    // timestamp-query where the adapter has it: createAttentionEngine({ profile: true }) times kernels with it.
    // subgroups where the adapter has it: the subgroup kernel variants (variants.ts) need it, and are offered only then.
    requiredFeatures: (['shader-f16', 'timestamp-query', 'subgroups'] as const).filter((f) => adapter.features.has(f)),
    requiredLimits: {
      maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
      maxBufferSize: l.maxBufferSize,
      maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: l.maxComputeWorkgroupSizeX,
    },
  });
  const fallback = (adapter.info as { isFallbackAdapter?: boolean } | undefined)?.isFallbackAdapter ?? (adapter as { isFallbackAdapter?: boolean }).isFallbackAdapter;
  return { device, adapterInfo: describeAdapter(adapter.info), isFallbackAdapter: fallback === true };
}

export function describeAdapter(info: GPUAdapterInfo | undefined): AcquiredDevice['adapterInfo'] {
  return {
    vendor: info?.vendor ?? '',
    architecture: info?.architecture ?? '',
    device: info?.device ?? '',
    description: info?.description ?? '',
  };
}

/**
 * The adapter behind a device and the device's features, as the kernel chooser needs them: data, fixed
 * for the device's life (a recovered loss brings a new state with its own).
 */
export interface DeviceAdapter {
  info: AdapterInfo;
  /** Identifies the adapter: tuning choices are remembered per key. */
  key: string;
  /** What kind of adapter runs the kernels (variant-record.ts adapterKind): it decides the built-in choices and the candidates. */
  kind: AdapterKind;
  /** Whether it runs its shaders on the CPU: its kind, or GPUAdapterInfo.isFallbackAdapter where the info names nothing (Firefox's). */
  software: boolean;
  /** Whether the device has the `subgroups` feature: only then are subgroup variants chosen or candidates. */
  subgroups: boolean;
}

/** One device and what lives on it (webgpu/runtime.ts). A new generation after each recovery from a loss. */
export interface DeviceState {
  device: GPUDevice;
  pool: BufferPool;
  generation: number;
  adapter: DeviceAdapter;
  lost: GPUDeviceLostInfo | null;
  /**
   * Set by the runtime when the device is lost or the engine disposed: background work started on this
   * state checks it and stops (it reads this flag; it never asks the runtime).
   */
  retired: boolean;
}
