// Paged caches of every dtype (issue 40: createPagedKvCache({ dtype })): each sequence of a paged call
// against the same sequence run alone on a plain cache of that dtype. On 'cpu' a row is the float64 row
// rounded to float32 then encoded, by the same code on both sides: the outputs are equal bit for bit, and
// the pools' rows (read()) equal the plain caches'. Fork and truncate on a q-dtype pool as well.

import { describe, expect, test } from 'vitest';
import type { KvCacheDtype } from '../src/index.ts';
import { kvRowBytes } from '../src/quant/kv.ts';
import { useEngines } from './helpers/engines.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines('cpu');
const DTYPES = ['f32', 'f16', 'q8_0', 'q4_0'] as const satisfies readonly KvCacheDtype[];
const config = { embedDim: 128, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } };
const E = config.embedDim;

describe.each(DTYPES)("'cpu' paged pool of %s", (dtype) => {
  test('mixed prefills then steps: each sequence equals its run alone on a plain cache of the dtype, bit for bit; fork and truncate', async () => {
    const mha = engines.cpu.createMultiHeadAttention(config, randomStateDict(config, 7));
    const paged = mha.createPagedKvCache({ blockSize: 8, maxBlocks: 64, dtype });
    expect(paged.dtype).toBe(dtype);
    expect(paged.bytes).toBe(2 * 64 * 2 * 8 * (dtype === 'f32' ? 8 * 32 : kvRowBytes(dtype, 32))); // float64 rows for 'f32' (the reference's)
    const lengths = [1, 9, 17];
    const ids = lengths.map(() => paged.addSequence());
    const solo = lengths.map(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 64, dtype }));
    const r = mulberry32(3);
    const run = async (rows: number[]) => {
      const xs = rows.map((n) => uniform(n * E, 1, r));
      const x = new Float32Array(rows.reduce((a, n) => a + n, 0) * E);
      let at = 0;
      for (const xi of xs) {
        x.set(xi, at);
        at += xi.length;
      }
      const { output } = await mha.forward(x, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: rows[i] })) });
      at = 0;
      for (const [i, xi] of xs.entries()) {
        const alone = await mha.forward(xi, { batchSize: 1, seqLen: rows[i], kvCache: solo[i], isCausal: true });
        expect(output.subarray(at, at + xi.length)).toEqual(alone.output);
        at += xi.length;
      }
    };
    await run(lengths);
    await run([1, 1, 1]);
    await run([3, 1, 8]);
    for (const [i, id] of ids.entries()) {
      const [mine, theirs] = [await paged.read(id), await solo[i].read()];
      expect(mine.key).toEqual(theirs.key);
      expect(mine.value).toEqual(theirs.value);
    }
    // A fork of sequence 2 and the parent go on apart; the parent's rows stay its own.
    const before = await paged.read(ids[2]);
    const child = paged.fork(ids[2]);
    const step = uniform(E, 1, r);
    const a = await mha.forward(step, { kvCache: paged, sequences: [{ id: child, length: 1 }] });
    expect(await paged.read(ids[2])).toEqual(before);
    const b = await mha.forward(step, { batchSize: 1, seqLen: 1, kvCache: solo[2], isCausal: true });
    expect(a.output).toEqual(b.output);
    paged.truncate(child, 5);
    solo[2].truncate(5);
    const c = await mha.forward(step, { kvCache: paged, sequences: [{ id: child, length: 1 }] });
    const d = await mha.forward(step, { batchSize: 1, seqLen: 1, kvCache: solo[2], isCausal: true });
    expect(c.output).toEqual(d.output);
  });
});
