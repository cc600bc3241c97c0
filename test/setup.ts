// Runs around every test file: a test during which any watched WebGPU device reported an uncaptured
// error fails, with the error's message.

import { afterEach } from 'vitest';
import { takeUncapturedErrors } from './helpers/gpu.ts';

afterEach(() => {
  const errors = takeUncapturedErrors();
  if (errors.length) throw new Error(`uncaptured WebGPU error(s) during this test:\n${errors.join('\n')}`);
});
