// Weights the way numpy tutorials (and many from-scratch implementations) write them: matrices
// [in, out] used as `x @ W`, not PyTorch's nn.Linear [out, in] used as x·Wᵀ.
//
//   Q = x @ W_Q + b_Q,  K = x @ W_K + b_K,  V = x @ W_V + b_V        x [S, E], W_Q [E, E]
//   head_i = softmax(Q_i K_iᵀ / √Dh) V_i                              Q_i = Q[:, i·Dh : (i+1)·Dh]
//   out = concat(head_1, …, head_H) @ W_O + b_O                       W_O [E, E]
//
// or, written per head, W_Q_i [E, Dh] with Q_i = x @ W_Q_i (then W_Q = concat(W_Q_1 … W_Q_H) along
// its columns), or fused, W_qkv [E, 3E] with [Q | K | V] = x @ W_qkv.
//
// Handing such matrices to the engine as in_proj_weight / out_proj.weight (which are [out, in]) would
// transpose every projection. For square W_Q the lengths match, so nothing would complain: the layer
// would run and be silently wrong. This helper does the transposition and the stacking.

import { InvalidArgumentError, MissingWeightError, ShapeMismatchError } from '../errors.ts';
import type { StateDict } from '../types.ts';
import { describe, knownKeys, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from '../validate.ts';
import { transpose } from './layouts.ts';

/** A projection as one matrix [E, n] or as a list of per-head matrices [E, Dh], used as x @ W. */
export type MatmulProjection = Float32Array | readonly Float32Array[];
/** A bias as one vector [n] or a list of per-head vectors [Dh]. */
export type MatmulBias = Float32Array | readonly Float32Array[];

export interface MatmulWeights {
  /** Fused [E, (H + 2G)·Dh] = [E, 3E]: [Q | K | V] = x @ wQkv. Or give wQ, wK and wV. */
  wQkv?: Float32Array;
  /** [E, H·Dh] = [E, E], or a list of H per-head [E, Dh] (W_Q_i). */
  wQ?: MatmulProjection;
  /** [E, G·Dh] = [E, E], or a list of G per-head [E, Dh]. */
  wK?: MatmulProjection;
  /** [E, G·Dh] = [E, E], or a list of G per-head [E, Dh]. */
  wV?: MatmulProjection;
  /** wO [E, E]: out = concat(heads) @ wO + bO; concat(heads) has head i in columns i·Dh … i·Dh + Dh − 1. */
  wO: Float32Array;
  /** [3E], with wQkv. */
  bQkv?: Float32Array;
  /** [E] or per-head [Dh] ×H; likewise bK, bV with G. */
  bQ?: MatmulBias;
  bK?: MatmulBias;
  bV?: MatmulBias;
  /** [E]. */
  bO?: Float32Array;
  embedDim: number;
  numHeads: number;
  /** G for grouped-query attention. Default numHeads. */
  numKvHeads?: number;
  /**
   * Default true: the state_dict gets in_proj_bias and out_proj.bias, zeros where no bias was given
   * (for a layer created with the default bias: true). false: no biases (create the layer with
   * bias: false); giving a bias then is an error.
   */
  bias?: boolean;
}

const WHERE = 'stateDictFromMatmulWeights';
/** MatmulWeights' keys (checked against the type: knownKeys). */
const KEYS = knownKeys<MatmulWeights>({
  wQkv: true,
  wQ: true,
  wK: true,
  wV: true,
  wO: true,
  bQkv: true,
  bQ: true,
  bK: true,
  bV: true,
  bO: true,
  embedDim: true,
  numHeads: true,
  numKvHeads: true,
  bias: true,
});

function matrix(argument: string, value: unknown, rows: number, cols: number, names: string, hint = ''): Float32Array {
  const shape = `[${names}] = [${rows}, ${cols}] = ${rows * cols}`;
  if (!(value instanceof Float32Array)) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument,
      expected: `a Float32Array ${shape}, row-major, used as x @ W`,
      given: describe(value),
      fix: 'Convert it with Float32Array.from(matrix.flat()).',
    });
  }
  if (value.length !== rows * cols) {
    throw new ShapeMismatchError({ where: WHERE, argument, expected: `of length ${shape}`, given: `length ${value.length}`, fix: hint || undefined });
  }
  return value;
}

/**
 * One projection as [E, n·Dh] (x @ W), from a matrix [E, n·Dh] or a list of n per-head [E, Dh].
 * `n` is H for wQ, G for wK and wV.
 */
function projection(argument: string, value: unknown, E: number, n: number, Dh: number, letter: string, countName: string): Float32Array {
  if (Array.isArray(value)) {
    if (value.length !== n) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument,
        expected: `a list of ${countName} = ${n} per-head matrices W_${letter}_i [E, Dh] = [${E}, ${Dh}]`,
        given: `a list of ${value.length}`,
        fix:
          value.length === 1
            ? `With one matrix for all heads pass it alone (a Float32Array [E, ${n * Dh}]), not in a list.`
            : `Pass one matrix per ${letter === 'Q' ? 'query' : 'key/value'} head.`,
      });
    }
    const heads = value.map((m, i) =>
      matrix(
        `${argument}[${i}]`,
        m,
        E,
        Dh,
        'E, Dh',
        m instanceof Float32Array && m.length === E * E && n > 1
          ? `This looks like the whole [E, E] matrix; a per-head list holds each head's [E, Dh] = [${E}, ${Dh}] columns.`
          : '',
      ),
    );
    // concat along columns: W[r, i·Dh + d] = W_i[r, d].
    const w = new Float32Array(E * n * Dh);
    for (let i = 0; i < n; i++) {
      for (let r = 0; r < E; r++) w.set(heads[i].subarray(r * Dh, (r + 1) * Dh), r * n * Dh + i * Dh);
    }
    return w;
  }
  return matrix(
    argument,
    value,
    E,
    n * Dh,
    n * Dh === E ? 'E, E' : `E, ${countName}·Dh`,
    value instanceof Float32Array && value.length === E * Dh && n > 1
      ? `That is one head's size [E, Dh] = [${E}, ${Dh}]: pass the list of all ${n} per-head matrices, or the full [E, ${n * Dh}] matrix.`
      : '',
  );
}

function vector(argument: string, value: unknown, length: number, shape: string): Float32Array {
  if (!(value instanceof Float32Array)) {
    throw new InvalidArgumentError({ where: WHERE, argument, expected: `a Float32Array ${shape} = ${length}`, given: describe(value) });
  }
  if (value.length !== length) throw new ShapeMismatchError({ where: WHERE, argument, expected: `of length ${shape} = ${length}`, given: `length ${value.length}` });
  return value;
}

function biasVector(argument: string, value: unknown, n: number, Dh: number, countName: string): Float32Array {
  if (Array.isArray(value)) {
    if (value.length !== n) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument,
        expected: `a list of ${countName} = ${n} per-head vectors [Dh] = [${Dh}]`,
        given: `a list of ${value.length}`,
      });
    }
    const b = new Float32Array(n * Dh);
    value.forEach((v, i) => {
      b.set(vector(`${argument}[${i}]`, v, Dh, `[Dh] = [${Dh}]`), i * Dh);
    });
    return b;
  }
  return vector(argument, value, n * Dh, `[${countName === 'numHeads' ? 'H' : 'G'}·Dh] = [${n * Dh}]`);
}

/**
 * Builds the engine's StateDict from matmul-style weights ([in, out], used as x @ W; see the top of
 * this module), transposing them to PyTorch's [out, in] and stacking Q, K, V into in_proj_weight.
 * Pass either wQkv (fused) or all of wQ, wK, wV (each a matrix or a per-head list), and wO.
 *
 *   const sd = stateDictFromMatmulWeights({ wQ: [Wq0, Wq1], wK: [Wk0, Wk1], wV: [Wv0, Wv1], wO, embedDim: 8, numHeads: 2 });
 *   const layer = engine.createMultiHeadAttention({ embedDim: 8, numHeads: 2 }, sd);
 *
 * Weights already in PyTorch's layout (nn.Linear, y = x·Wᵀ + b: [out, in]) are not for this helper:
 * pass them as in_proj_weight / out_proj.weight directly.
 */
export function stateDictFromMatmulWeights(weights: MatmulWeights): StateDict {
  const o = requireObject(WHERE, 'weights', weights, 'Pass { wQkv or wQ, wK, wV; wO; embedDim, numHeads }.');
  rejectUnknownKeys(WHERE, 'weights', o, KEYS);
  const E = requirePositiveInteger(WHERE, 'weights.embedDim', o.embedDim);
  const H = requirePositiveInteger(WHERE, 'weights.numHeads', o.numHeads);
  if (E % H !== 0) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'weights.embedDim', expected: `divisible by numHeads (${H})`, given: String(E) });
  }
  const G = o.numKvHeads === undefined ? H : requirePositiveInteger(WHERE, 'weights.numKvHeads', o.numKvHeads);
  if (H % G !== 0) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'weights.numKvHeads', expected: `a divisor of numHeads (${H})`, given: String(G) });
  }
  const bias = o.bias === undefined ? true : requireBoolean(WHERE, 'weights.bias', o.bias);
  const Dh = E / H;
  const N = (H + 2 * G) * Dh;

  const separate = ['wQ', 'wK', 'wV'].filter((k) => o[k] !== undefined);
  if (o.wQkv !== undefined && separate.length) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: `weights.${separate[0]}`,
      expected: 'left out when wQkv is given',
      given: describe(o[separate[0]]),
      fix: 'Pass either the fused wQkv [E, 3E] or wQ, wK and wV, not both.',
    });
  }
  if (o.wQkv === undefined && separate.length < 3) {
    const missing = ['wQ', 'wK', 'wV'].filter((k) => o[k] === undefined);
    throw new MissingWeightError({
      where: WHERE,
      argument: `weights.${missing[0]}`,
      expected: `given (${separate.length ? `with ${separate.join(', ')}` : 'or the fused wQkv'})`,
      given: 'nothing',
      fix: `Pass the fused wQkv [E, ${N === 3 * E ? '3E' : '(H + 2G)·Dh'}] = [${E}, ${N}] or all of wQ, wK, wV.`,
    });
  }
  if (o.wO === undefined) {
    throw new MissingWeightError({
      where: WHERE,
      argument: 'weights.wO',
      expected: `a Float32Array [E, E] = [${E}, ${E}]`,
      given: 'nothing',
      fix: 'out = concat(heads) @ wO + bO needs wO.',
    });
  }

  // [E, N] as x @ W, Q columns then K then V.
  let wIn: Float32Array;
  if (o.wQkv !== undefined) {
    wIn = matrix('weights.wQkv', o.wQkv, E, N, N === 3 * E ? 'E, 3E' : 'E, (H + 2G)·Dh');
  } else {
    const q = projection('weights.wQ', o.wQ, E, H, Dh, 'Q', 'numHeads');
    const k = projection('weights.wK', o.wK, E, G, Dh, 'K', 'numKvHeads');
    const v = projection('weights.wV', o.wV, E, G, Dh, 'V', 'numKvHeads');
    wIn = new Float32Array(E * N);
    for (let r = 0; r < E; r++) {
      wIn.set(q.subarray(r * H * Dh, (r + 1) * H * Dh), r * N);
      wIn.set(k.subarray(r * G * Dh, (r + 1) * G * Dh), r * N + H * Dh);
      wIn.set(v.subarray(r * G * Dh, (r + 1) * G * Dh), r * N + (H + G) * Dh);
    }
  }
  const sd: StateDict = {
    in_proj_weight: transpose(wIn, E, N),
    'out_proj.weight': transpose(matrix('weights.wO', o.wO, E, E, 'E, E'), E, E),
  };

  const biases = ['bQkv', 'bQ', 'bK', 'bV', 'bO'].filter((k) => o[k] !== undefined);
  if (!bias) {
    if (biases.length) {
      throw new InvalidArgumentError({
        where: WHERE,
        argument: `weights.${biases[0]}`,
        expected: 'left out with bias: false',
        given: describe(o[biases[0]]),
        fix: 'Leave bias out (or true) to use the biases.',
      });
    }
    return sd;
  }
  if (o.bQkv !== undefined && (o.bQ !== undefined || o.bK !== undefined || o.bV !== undefined)) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'weights.bQkv',
      expected: 'left out when bQ, bK or bV is given',
      given: describe(o.bQkv),
      fix: 'Pass either the fused bQkv or bQ, bK, bV.',
    });
  }
  const bIn = new Float32Array(N); // a bias not given is zero
  if (o.bQkv !== undefined) bIn.set(vector('weights.bQkv', o.bQkv, N, `[(H + 2G)·Dh] = [${N}]`));
  if (o.bQ !== undefined) bIn.set(biasVector('weights.bQ', o.bQ, H, Dh, 'numHeads'), 0);
  if (o.bK !== undefined) bIn.set(biasVector('weights.bK', o.bK, G, Dh, 'numKvHeads'), H * Dh);
  if (o.bV !== undefined) bIn.set(biasVector('weights.bV', o.bV, G, Dh, 'numKvHeads'), (H + G) * Dh);
  sd.in_proj_bias = bIn;
  sd['out_proj.bias'] = o.bO === undefined ? new Float32Array(E) : vector('weights.bO', o.bO, E, `[E] = [${E}]`).slice();
  return sd;
}
