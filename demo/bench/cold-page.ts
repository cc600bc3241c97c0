// The page `npm run bench -- --cold` opens in a fresh browser profile for each measurement.
import { type ColdResult, coldFirstCall } from './cold.ts';
import type { BenchShape } from './types.ts';

declare global {
  interface Window {
    runCold: (system: 'engine' | 'tfjs', shape: BenchShape) => Promise<ColdResult>;
  }
}

window.runCold = (system, shape) => coldFirstCall(system, shape);
