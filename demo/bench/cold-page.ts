// The page `npm run bench -- --cold` opens in a fresh browser profile for each measurement.
import { type ColdResult, type ColdWeights, coldFirstCall } from './cold.ts';
import type { BenchShape } from './types.ts';

declare global {
  interface Window {
    runCold: (system: 'engine' | 'tfjs', shape: BenchShape, weights?: ColdWeights) => Promise<ColdResult>;
  }
}

window.runCold = (system, shape, weights) => coldFirstCall(system, shape, 5, weights);
