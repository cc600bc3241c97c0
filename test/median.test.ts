// util/stats.ts's median, the one the tuner's decision rule (measure.ts), the benchmark, the demo and the scripts use.

import { expect, test } from 'vitest';
import { median } from '../src/util/stats.ts';

test('median: the middle value, the mean of the two middle ones for an even count, NaN for none; the input is not reordered', () => {
  const odd = [5, 1, 3];
  expect(median(odd)).toBe(3);
  expect(odd).toEqual([5, 1, 3]);
  expect(median([4, 1, 3, 2])).toBe(2.5);
  expect(median([7])).toBe(7);
  expect(median([10, 2, 33])).toBe(10); // numeric order, not string order
  expect(median([])).toBeNaN();
});
