#!/usr/bin/python3
"""PyTorch fixtures: an oracle for the engine that shares no code with it.

Run with Debian's Python, which has torch and numpy (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 scripts/make_fixtures.py

For each case it builds torch.nn.MultiheadAttention(E, H, bias=..., batch_first=True) in eval()
mode, draws its weights and the input as float32 (torch.manual_seed per case; PyTorch's own init
for the weights, random nonzero biases, since PyTorch initialises them to 0), then runs the module
in float64 on exactly those float32 values (need_weights=False; a causal case passes the boolean
mask triu(ones(S, S), 1), as 1.13's MultiheadAttention has no is_causal). It writes one JSON file
per case to test/fixtures/pytorch/ (read by test/pytorch-fixtures.test.ts):

    description, torch_version,
    config   {embedDim, numHeads, bias}
    options  {batchSize, seqLen, isCausal}
    stateDict {in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias}
              flat row-major float32 values; no biases when bias is false
    query    flat [B, S, E] float32 values
    output   flat [B, S, E] float64 reference output, 17 significant digits
    attentionWeights  flat [B, H, S, S] (need_weights=True, average_attn_weights=False), small cases only

Inputs are written with the fewest digits that give back the same float32 when parsed as a
double and then rounded to float32 (what JSON.parse + Float32Array do), checked value by value.
"""

import json
import math
import os
import sys

import numpy as np
import torch

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'pytorch')

# (E, H, B, S, causal, bias, input scale)
CASES = [
    (8, 2, 2, 5, False, True, 1.0),
    (8, 2, 2, 5, True, True, 1.0),
    (12, 3, 1, 1, False, True, 1.0),
    (16, 1, 3, 7, False, False, 1.0),
    (32, 4, 2, 33, True, True, 1.0),
    (24, 6, 1, 17, False, True, 1.0),   # Dh = 4
    (32, 1, 1, 9, False, True, 1.0),    # Dh = 32
    (16, 2, 2, 6, False, True, 4.0),    # inputs ×4: large logits that still blend several keys
    (16, 2, 2, 6, True, True, 25.0),    # inputs ×25: logits in the hundreds, near one-hot softmax
]


def case_name(E, H, B, S, causal, bias, scale):
    name = f'mha_E{E}_H{H}_B{B}_S{S}'
    if causal:
        name += '_causal'
    if not bias:
        name += '_nobias'
    if scale != 1.0:
        name += f'_x{scale:g}'
    return name


def f32_text(x):
    """Shortest decimal that JSON.parse + Float32Array turn back into this float32."""
    f = np.float32(x)
    candidates = [np.format_float_positional(f, unique=True, trim='-'),
                  np.format_float_scientific(f, unique=True, trim='-').replace('e+', 'e')]
    candidates = [c.replace('e0', 'e').replace('e-0', 'e-') for c in candidates]
    # Decimal → double (correctly rounded) → float32 (round to nearest even) must give f back.
    ok = [c for c in candidates if math.isfinite(float(c)) and np.float32(float(c)) == f]
    if not ok:
        ok = [repr(float(f))]  # the exact double of the float32 value: always round-trips
        assert np.float32(float(ok[0])) == f
    return min(ok, key=len)


def f64_text(x):
    x = float(x)
    assert math.isfinite(x)
    s = '%.17g' % x
    assert float(s) == x
    return s


def array_text(values, fmt):
    return '[' + ','.join(fmt(v) for v in values) + ']'


def make_case(index, E, H, B, S, causal, bias, scale):
    torch.manual_seed(1000 + index)
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True)  # float32, PyTorch's init
    mha.eval()
    with torch.no_grad():
        if bias:
            bound = 1 / math.sqrt(E)
            mha.in_proj_bias.uniform_(-bound, bound)
            mha.out_proj.bias.uniform_(-bound, bound)
        query32 = (torch.randn(B, S, E, dtype=torch.float32) * scale).float()
    state32 = {k: v.detach().float().clone() for k, v in mha.state_dict().items()}
    assert set(state32) == ({'in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias'} if bias
                            else {'in_proj_weight', 'out_proj.weight'}), sorted(state32)
    if bias:
        assert torch.all(state32['in_proj_bias'] != 0) and torch.all(state32['out_proj.bias'] != 0)

    mha64 = mha.double()
    mha64.eval()
    q64 = query32.double()
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1) if causal else None
    with torch.no_grad():
        out, weights = mha64(q64, q64, q64, need_weights=False, attn_mask=mask)
    assert weights is None
    # The per-head probabilities (need_weights=True, average_attn_weights=False) of small cases.
    with_weights = B * H * S * S <= 4096
    if with_weights:
        with torch.no_grad():
            out_w, probs = mha64(q64, q64, q64, need_weights=True, average_attn_weights=False, attn_mask=mask)
        assert probs.shape == (B, H, S, S) and torch.allclose(out_w, out, rtol=0, atol=1e-13)
    assert out.dtype == torch.float64 and out.shape == (B, S, E)
    # The double module must hold exactly the float32 values written to the file.
    for k, v in mha64.state_dict().items():
        assert torch.equal(v, state32[k].double()), k

    name = case_name(E, H, B, S, causal, bias, scale)
    desc = (f'torch.nn.MultiheadAttention(embed_dim={E}, num_heads={H}, bias={bias}, batch_first=True), eval, '
            f'float64 on float32-drawn weights and query (seed {1000 + index}'
            + (f', query scaled x{scale:g}' if scale != 1.0 else '') + '), need_weights=False'
            + (', attn_mask=triu(ones(S,S,bool),1) (causal)' if causal else '') + '.')
    order = ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']
    sd_lines = [f'    {json.dumps(k)}: {array_text(state32[k].reshape(-1).numpy(), f32_text)}'
                for k in order if k in state32]
    text = '{\n' + ',\n'.join([
        f'  "description": {json.dumps(desc)}',
        f'  "torch_version": {json.dumps(torch.__version__)}',
        f'  "config": {json.dumps({"embedDim": E, "numHeads": H, "bias": bias})}',
        f'  "options": {json.dumps({"batchSize": B, "seqLen": S, "isCausal": causal})}',
        '  "stateDict": {\n' + ',\n'.join(sd_lines) + '\n  }',
        f'  "query": {array_text(query32.reshape(-1).numpy(), f32_text)}',
        f'  "output": {array_text(out.reshape(-1).numpy(), f64_text)}',
    ] + ([f'  "attentionWeights": {array_text(probs.reshape(-1).numpy(), f64_text)}'] if with_weights else [])) + '\n}\n'

    # Read it back the way the test will, and check every value.
    back = json.loads(text)
    for k in state32:
        got = np.array(back['stateDict'][k], dtype=np.float64).astype(np.float32)
        assert np.array_equal(got, state32[k].reshape(-1).numpy()), k
    assert np.array_equal(np.array(back['query'], dtype=np.float64).astype(np.float32), query32.reshape(-1).numpy())
    assert np.array_equal(np.array(back['output'], dtype=np.float64), out.reshape(-1).numpy())

    path = os.path.join(OUT_DIR, name + '.json')
    with open(path, 'w') as f:
        f.write(text)
    return path, len(text)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_grad_enabled(False)
    total = 0
    for i, case in enumerate(CASES):
        path, size = make_case(i, *case)
        total += size
        print(f'{os.path.relpath(path)}  {size / 1024:.1f} KiB')
    print(f'{len(CASES)} fixtures, {total / 1024:.1f} KiB, torch {torch.__version__}', file=sys.stderr)


if __name__ == '__main__':
    main()
