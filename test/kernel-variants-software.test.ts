// Every kernel variant written for CPU rasterizers (src/webgpu/software/: the unrolled and shuffle
// attention bodies, the FMA subgroup GEMM), forced, over the variant grid (test/helpers/variant-grid.ts).
// A file of its own so that it runs beside kernel-variants.test.ts on the second vitest worker.

import { ATTENTION_VARIANTS, isSoftwareVariant, PROJECTION_VARIANTS } from '../src/webgpu/variants.ts';
import { describeVariantGrid } from './helpers/variant-grid.ts';

describeVariantGrid(PROJECTION_VARIANTS.filter(isSoftwareVariant), ATTENTION_VARIANTS.filter(isSoftwareVariant));
