// What a Node user is told to do when WebGPU is missing: the `webgpu` package (Dawn) is an optional
// peer dependency, so it may not be installed. The import of Dawn is replaced here, so these tests
// need no GPU; each loads the engine afresh, since the engine keeps Dawn once it has loaded it. Where
// Dawn finds no adapter, the message names the step for the platform (a package user has no scripts/).

import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';

const importNodeOnly = vi.hoisted(() => vi.fn<(specifier: string) => Promise<unknown>>());
vi.mock('../src/node-only.ts', () => ({ importNodeOnly }));

/** The engine's modules, loaded afresh (with the mocked import of Dawn). */
async function freshEngine() {
  vi.resetModules();
  const lib = await import('../src/index.ts');
  const { DAWN_PACKAGE } = await import('../src/webgpu/device.ts');
  return { ...lib, DAWN_PACKAGE };
}

/** The message `createAttentionEngine({ backend: 'webgpu' })` rejects with. */
async function whyNoWebGPU(): Promise<string> {
  const { createAttentionEngine, WebGPUUnavailableError } = await freshEngine();
  const error = await createAttentionEngine({ backend: 'webgpu' }).then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WebGPUUnavailableError);
  return (error as Error).message;
}

beforeEach(() => {
  importNodeOnly.mockReset();
});

describe('without the webgpu package', () => {
  beforeEach(() => {
    // Only Dawn is missing: node:os and node:worker_threads (the 'wasm' backend's threads) load as usual.
    importNodeOnly.mockImplementation((specifier) =>
      specifier === 'webgpu'
        ? Promise.reject(Object.assign(new Error("Cannot find package 'webgpu'"), { code: 'ERR_MODULE_NOT_FOUND' }))
        : import(/* @vite-ignore */ specifier),
    );
  });

  test('the install command names the version package.json asks for as a peer', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    const { DAWN_PACKAGE } = await freshEngine();
    expect(DAWN_PACKAGE).toBe(`webgpu@${pkg.peerDependencies.webgpu}`);
    expect(pkg.peerDependenciesMeta.webgpu.optional).toBe(true);
    expect(pkg.devDependencies.webgpu).toBe(pkg.peerDependencies.webgpu);
  });

  test("backend: 'webgpu' fails and says what to run", async () => {
    const message = await whyNoWebGPU();
    expect(message).toContain("Cannot find package 'webgpu'");
    expect(message).toContain('npm install webgpu@');
    expect(importNodeOnly).toHaveBeenCalledWith('webgpu');
  });

  test("no backend asked for: the 'wasm' backend, and fallbackReason says what to run for WebGPU", async () => {
    const { createAttentionEngine } = await freshEngine();
    const engine = await createAttentionEngine();
    expect(engine.backend).toBe('wasm');
    expect(engine.fallbackReason).toContain('npm install webgpu@');
    expect(engine.fallbackReason).toContain("So the 'wasm' backend runs");
    engine.dispose();
  });
});

describe('with Dawn but no adapter: the step for the platform, nothing from this repository', () => {
  const platform = Object.getOwnPropertyDescriptor(process, 'platform')!;
  beforeEach(() => {
    importNodeOnly.mockResolvedValue({ create: () => ({ requestAdapter: async () => null }) });
  });
  afterEach(() => {
    Object.defineProperty(process, 'platform', platform);
  });

  test.for([
    { os: 'linux', says: ['Vulkan', 'sudo apt-get install mesa-vulkan-drivers', 'bookworm-backports'] },
    { os: 'darwin', says: ['Metal', 'nothing installed'] },
    { os: 'win32', says: ['Direct3D 12', 'update the GPU driver'] },
  ])('$os', async ({ os, says }) => {
    Object.defineProperty(process, 'platform', { ...platform, value: os });
    const message = await whyNoWebGPU();
    expect(message).toContain('requestAdapter() returned null');
    for (const s of says) expect(message).toContain(s);
    expect(message).not.toContain('scripts/');
  });
});
