// Runs around every test file: a test during which any watched WebGPU device reported an uncaptured
// error fails, with the error's message. Engines created with the default tuning store remember their
// sweeps in a folder of this test file, never in the user's ~/.cache. (Mesa's shader cache, which would
// also follow XDG_CACHE_HOME, is one folder for the whole run: MESA_SHADER_CACHE_DIR, test/global-setup.ts.)

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import { throttleDawnPolling } from './helpers/dawn-poll.ts';
import { takeUncapturedErrors } from './helpers/gpu.ts';

throttleDawnPolling();

process.env.XDG_CACHE_HOME = mkdtempSync(join(tmpdir(), 'webgpu-attention-test-cache-'));

afterEach(() => {
  const errors = takeUncapturedErrors();
  if (errors.length) throw new Error(`uncaptured WebGPU error(s) during this test:\n${errors.join('\n')}`);
});
