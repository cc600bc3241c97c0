// A call's geometry (types.ts Geometry), computed once when the call is planned.

import type { Geometry, PlanMode } from './types.ts';

/** The geometry of a call of `sequences` sequences of Sq queries and Skv keys (varlen: Sq = Skv = T tokens, `longest` the longest). */
export function geometryOf(mode: PlanMode, sequences: number, Sq: number, Skv: number, longest = Sq): Geometry {
  return mode === 'varlen'
    ? { sequences, batches: 1, qRows: Sq, kvRows: Sq, tokens: Sq, longestSequence: longest }
    : { sequences, batches: sequences, qRows: Sq, kvRows: Skv, tokens: sequences * Sq, longestSequence: Sq };
}
