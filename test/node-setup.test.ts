// What a Node user is told to do when WebGPU is missing: the `webgpu` package (Dawn) is an optional
// peer dependency, so it may not be installed. The import of Dawn is replaced here, so these tests
// need no GPU; each loads the engine afresh, since the engine keeps Dawn once it has loaded it.

import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, test, vi } from 'vitest';

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
    importNodeOnly.mockRejectedValue(Object.assign(new Error("Cannot find package 'webgpu'"), { code: 'ERR_MODULE_NOT_FOUND' }));
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

  test('no backend asked for: falls back to the CPU, and fallbackReason says what to run', async () => {
    const { createAttentionEngine } = await freshEngine();
    const engine = await createAttentionEngine();
    expect(engine.backend).toBe('cpu');
    expect(engine.fallbackReason).toContain('npm install webgpu@');
    engine.dispose();
  });
});
