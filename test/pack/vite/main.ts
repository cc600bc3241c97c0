// A throwaway Vite app consuming the packed tarball (scripts/pack-test.mjs builds it with `vite build`,
// serves it with `vite preview` and opens it in Chromium). The page imports the package by name, as
// a user would; the shaders must come inlined in the package's JavaScript (the driver fails on any
// .wgsl request) and the Node-only `webgpu` package must stay out of the bundle.
import * as lib from 'webgpu-attention';
import { type PackCaseResult, runPackCase } from '../case.mjs';

declare global {
  interface Window {
    /** Set when the module runs; resolves to the outcome (scripts/pack-test.mjs awaits it). */
    packTest?: Promise<PackCaseResult>;
  }
}

// Typed use of the WebGPU globals the package's .d.ts bring along.
async function adapterName(): Promise<string> {
  const adapter: GPUAdapter | null = (await navigator.gpu?.requestAdapter()) ?? null;
  return adapter ? `${adapter.info.vendor} ${adapter.info.architecture}` : 'none';
}

window.packTest = (async () => {
  const result = await runPackCase(lib);
  if (result.backend !== 'webgpu') result.problems.push(`navigator.gpu adapter: ${await adapterName()}`);
  document.getElementById('out')!.textContent = JSON.stringify(result, null, 2);
  return result;
})();
