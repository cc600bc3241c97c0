#!/usr/bin/env python3
"""KV-cache row fixtures: ggml's own encoding of awkward float32 rows (test/kv-quant-cpu.test.ts).

    /work/venv/bin/python scripts/make_kv_quant_fixtures.py      (numpy and the `gguf` package)

The bytes come from gguf-py's gguf.quants.quantize (ggml's Python package: Q8_0 and Q4_0 there are
"bit-exact" ports of ggml-quants.c's quantize_row_q8_0_ref / quantize_row_q4_0_ref), and 'f16' from
numpy's astype(float16) (IEEE round to nearest even, as GGML_FP32_TO_FP16). Nothing here is derived
from this engine's TypeScript: the test checks src/quant/kv.ts's encodeKvRows, and a 'cpu' cache's
readEncoded after createKvCache({ key, value, dtype }), against these bytes.

Rows (Dh 64, two blocks of 32 each): zeros; half-way ties (q8_0: amax 127 so d = 1 and x·id lands
on k + 0.5, roundf goes away from zero; q4_0: x·id + 8.5 on a .5 and on an integer); a block whose
largest magnitude is negative (q4_0's d = max / −8 > 0) beside one where it is positive; the same
magnitude at both signs (the first one counts); tiny values (the f16 scale subnormal, or 0 while
1/d stays finite); huge values (f16 overflow to ±Inf in the scale and in 'f16'); a zero block beside
a full one; random normal rows at several scales.

Written to test/fixtures/kv-quant/rows.json:
  { Dh, rows, input (float32 LE, base64, [rows, Dh]), f16, q8_0, q4_0 (the encoded rows, base64),
    q8_0_values, q4_0_values (gguf's dequantize of those rows, float32 [rows, Dh]) }
"""

import base64
import json
import os

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'kv-quant')
F32 = np.float32
Dh = 64
rng = np.random.default_rng(4040)


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode('ascii')


def block(values):
    """32 float32 values from a list (cycled)."""
    v = np.array(values, F32)
    return np.resize(v, 32).astype(F32)


rows = []
rows.append(np.zeros(Dh, F32))
# q8_0 ties: amax 127 → d = 1, id = 1: k + 0.5 rounds away from zero (roundf).
rows.append(np.concatenate([block([127, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 63.5]), block([-127, 3.5, -3.5, 0.25, 100.5, -100.5])]))
# q4_0 ties: max 8 → d = −1, id = −1: x·id + 8.5 on .5 (x integer) and on an integer (x half-integer).
rows.append(np.concatenate([block([8, 0.5, -0.5, 1.5, -1.5, 7.5, -7.5, 3, -3, 0]), block([-8, 2.5, -2.5, 6.5, -6.5, 4, -4, 1])]))
# Largest magnitude negative (q4_0: d = max / −8 > 0), then positive; then both signs at one magnitude.
rows.append(np.concatenate([block([-5.25, 1, 2, 3, -1, 0.1, 4.75]), block([5.25, -1, -2, -3, 1, -0.1, -4.75])]))
rows.append(np.concatenate([block([3, -3, 1, -1, 2]), block([-3, 3, 0.5, -2.9])]))
# Tiny: the f16 scale subnormal (amax 1e-4 → q8_0 d ≈ 7.9e-7) and 0 (amax 1e-7 → d below half's smallest subnormal).
rows.append(np.concatenate([rng.standard_normal(32).astype(F32) * F32(1e-4), rng.standard_normal(32).astype(F32) * F32(1e-7)]))
# Huge: a scale past 65504 (q8_0 amax 1e7; q4_0 amax 1e6) → ±Inf in f16; 'f16' rows overflow too.
rows.append(np.concatenate([block([1e7, -3e6, 12345.678, -1, 0, 7e5]), block([-1e6, 5e5, 65504, 65520, -70000, 2.0])]))
# A zero block beside a full one.
rows.append(np.concatenate([np.zeros(32, F32), rng.standard_normal(32).astype(F32)]))
for scale in (1, 0.03, 40):
    rows.append((rng.standard_normal(Dh) * scale).astype(F32))
x = np.stack(rows).astype(F32)

with np.errstate(over='ignore'):  # the huge row overflows f16 on purpose
    out = {
        'Dh': Dh,
        'rows': int(x.shape[0]),
        'input': b64(x),
        'f16': b64(x.astype(np.float16)),
        'q8_0': b64(quantize(x, GGMLQuantizationType.Q8_0)),
        'q4_0': b64(quantize(x, GGMLQuantizationType.Q4_0)),
    }
    # What the rows hold back (gguf's dequantize; an Inf scale gives ±Inf and NaN at 0·Inf, as ggml's).
    for name, t in (('q8_0', GGMLQuantizationType.Q8_0), ('q4_0', GGMLQuantizationType.Q4_0)):
        with np.errstate(invalid='ignore'):
            out[name + '_values'] = b64(dequantize(quantize(x, t), t).astype(F32))
assert len(base64.b64decode(out['q8_0'])) == x.shape[0] * 2 * 34
assert len(base64.b64decode(out['q4_0'])) == x.shape[0] * 2 * 18
os.makedirs(OUT, exist_ok=True)
with open(os.path.join(OUT, 'rows.json'), 'w') as f:
    json.dump(out, f, indent=1)
    f.write('\n')
print('wrote', os.path.join(OUT, 'rows.json'), x.shape)
