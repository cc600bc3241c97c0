// The loop unroller of the software kernels (software/flash-attention.ts): a text rewrite of WGSL that
// writes out loops over named constants, for CPU rasterizers whose compilers index private arrays by
// constants only when the source does. The kernels for GPUs never go through it.

/**
 * Writes out the loops of `code` whose bound is one of `counts`' names: `for (var x = 0u; x < N; x++) { … }`
 * becomes N copies of its body, each in its own braces with x replaced by its value, inner loops first.
 * For drivers that index private arrays by constants only when the source does (SwiftShader's JIT
 * does not unroll, and an array indexed by a variable is a gather there). Other loops stay as written.
 */
export function unrollLoops(code: string, counts: Record<string, number>): string {
  const head = /for \(var (\w+) = 0u; \1 < (\w+); \1\+\+\) \{/g;
  let out = '';
  let from = 0;
  for (let match = head.exec(code); match; match = head.exec(code)) {
    const [text, name, bound] = match;
    if (!(bound in counts) || match.index < from) continue;
    let depth = 1;
    let end = match.index + text.length;
    while (depth > 0) {
      if (end >= code.length) throw new Error(`unrollLoops: no closing brace for the loop over ${name}`);
      depth += code[end] === '{' ? 1 : code[end] === '}' ? -1 : 0;
      end++;
    }
    const body = unrollLoops(code.slice(match.index + text.length, end - 1), counts);
    const variable = new RegExp(`\\b${name}\\b`, 'g');
    const copies = Array.from({ length: counts[bound] }, (_, i) => `{${body.replace(variable, `${i}u`)}}`);
    out += code.slice(from, match.index) + copies.join('');
    from = end;
    head.lastIndex = end;
  }
  return out + code.slice(from);
}
