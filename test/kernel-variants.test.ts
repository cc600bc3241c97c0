// Every GPU-first kernel variant the tuner can choose (src/webgpu/variants.ts: the records outside
// src/webgpu/software/), forced, over the variant grid (test/helpers/variant-grid.ts says what it covers).
// The variants written for CPU rasterizers run the same grid in kernel-variants-software.test.ts.

import { ATTENTION_VARIANTS, isSoftwareVariant, PROJECTION_VARIANTS } from '../src/webgpu/variants.ts';
import { describeVariantGrid } from './helpers/variant-grid.ts';

describeVariantGrid(
  PROJECTION_VARIANTS.filter((v) => !isSoftwareVariant(v)),
  ATTENTION_VARIANTS.filter((v) => !isSoftwareVariant(v)),
);
