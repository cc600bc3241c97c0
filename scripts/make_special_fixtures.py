#!/usr/bin/python3
"""PyTorch fixtures for non-finite values: how NaN and ±Infinity in the input or in a weight propagate
through torch.nn.MultiheadAttention. Read by test/numbers.test.ts.

Run with Debian's Python, which has torch 1.13 and numpy (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 scripts/make_special_fixtures.py

It follows scripts/make_fixtures.py (whose number formatting it imports): weights and the query are
drawn as float32 (torch.manual_seed per case; PyTorch's own init for the weights, random nonzero
biases), one value is then replaced by NaN or +Infinity, and the module runs in float64 on exactly
those values, in eval() mode, with need_weights=True and average_attn_weights=False (the output
with need_weights=False is checked to be the same, NaN for NaN). A causal case passes the boolean
mask triu(ones(S, S), 1), as 1.13's MultiheadAttention has no is_causal.

PyTorch 1.13 has two code paths here: the native "fast path" (eval, self-attention with query is key
is value, even number of heads, no attn_mask) and the Python one. Every case is run both ways (the
Python path by passing a copy of the query as key and value) and the two must agree exactly, NaN
for NaN; what is stored is the result of the plain call mha(q, q, q).

JSON cannot hold NaN or ±Infinity: in every array such a value is written as the string "NaN",
"Infinity" or "-Infinity"; every other value is a number. One file per case in
test/fixtures/pytorch-special/:

    description, torch_version,
    config    {embedDim, numHeads, bias}
    options   {batchSize, seqLen, isCausal, needWeights: true}
    special   where the non-finite value was put: {tensor, index (flat), value}
    stateDict flat row-major float32 values (PyTorch names)
    query     flat [B, S, E] float32 values
    output    flat [B, S, E] float64 output
    attentionWeights  flat [B, H, S, S] float64 per-head probabilities
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (f32_text, f64_text, array_text)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'pytorch-special')

# name, (E, H, B, S, causal), where the special value goes: (tensor, multi-index), value, what it shows
CASES = [
    ('nan_query_token', (8, 2, 2, 5, False), ('query', (0, 2, 3)), math.nan,
     'a NaN in one channel of one query token (batch 0, token 2)'),
    ('nan_query_token_causal', (8, 2, 2, 5, True), ('query', (0, 2, 3)), math.nan,
     'a NaN in one channel of one query token (batch 0, token 2), causal: rows 0 and 1 do not see token 2'),
    ('inf_query_token', (8, 2, 2, 5, False), ('query', (0, 2, 3)), math.inf,
     '+Infinity in one channel of one query token (batch 0, token 2)'),
    ('inf_query_token_causal', (8, 2, 2, 5, True), ('query', (0, 2, 3)), math.inf,
     '+Infinity in one channel of one query token (batch 0, token 2), causal'),
    ('inf_query_token_one_head', (4, 1, 1, 6, False), ('query', (0, 3, 1)), math.inf,
     '+Infinity in one channel of one query token (token 3), one head'),
    ('nan_in_proj_weight_key', (8, 2, 2, 5, False), ('in_proj_weight', (8 + 1, 4)), math.nan,
     'a NaN in in_proj_weight, in a key row of head 0: every score of head 0 is NaN'),
    ('nan_out_proj_weight', (8, 2, 2, 5, False), ('out_proj.weight', (3, 5)), math.nan,
     'a NaN in out_proj.weight[3, 5]: output channel 3 is NaN everywhere'),
]


def special_text(x, fmt):
    x = float(x)
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return fmt(x)


def f32s(x):
    return special_text(x, mf.f32_text)


def f64s(x):
    return special_text(x, mf.f64_text)


def parse_special(v):
    return {'NaN': math.nan, 'Infinity': math.inf, '-Infinity': -math.inf}[v] if isinstance(v, str) else float(v)


def same(a, b):
    """Equal as arrays, NaN equal to NaN."""
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))


def make_case(index, name, dims, where, value, what):
    E, H, B, S, causal = dims
    torch.manual_seed(3000 + index)
    mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True)  # float32, PyTorch's init
    mha.eval()
    with torch.no_grad():
        bound = 1 / math.sqrt(E)
        mha.in_proj_bias.uniform_(-bound, bound)
        mha.out_proj.bias.uniform_(-bound, bound)
        query32 = torch.randn(B, S, E, dtype=torch.float32)
    state32 = {k: v.detach().float().clone() for k, v in mha.state_dict().items()}
    tensor, idx = where
    target = query32 if tensor == 'query' else state32[tensor]
    target[idx] = value
    flat_index = int(np.ravel_multi_index(idx, tuple(target.shape)))

    mha64 = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True).double()
    mha64.load_state_dict({k: v.double() for k, v in state32.items()})
    mha64.eval()
    for k, v in mha64.state_dict().items():
        assert same(v, state32[k].double()), k
    q64 = query32.double()
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1) if causal else None
    with torch.no_grad():
        out, probs = mha64(q64, q64, q64, need_weights=True, average_attn_weights=False, attn_mask=mask)
        out_nw, none = mha64(q64, q64, q64, need_weights=False, attn_mask=mask)
        kv = q64.clone()
        out_slow, probs_slow = mha64(q64, kv, kv, need_weights=True, average_attn_weights=False, attn_mask=mask)
    assert none is None
    assert out.shape == (B, S, E) and probs.shape == (B, H, S, S)
    assert same(out, out_nw), f'{name}: need_weights changes the output'
    # Both code paths must agree on where NaN and ±Infinity are; finite values to rounding.
    for a, b in ((out, out_slow), (probs, probs_slow)):
        assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.isinf(a), torch.isinf(b)), f'{name}: fast and slow paths differ'
        fin = torch.isfinite(a)
        assert torch.allclose(a[fin], b[fin], rtol=1e-12, atol=1e-12), f'{name}: fast and slow paths differ'
        assert torch.equal(a[torch.isinf(a)], b[torch.isinf(b)])

    desc = (f'torch.nn.MultiheadAttention(embed_dim={E}, num_heads={H}, bias=True, batch_first=True), eval, '
            f'float64 on float32-drawn weights and query (seed {3000 + index}), need_weights=True, '
            f'average_attn_weights=False' + (', attn_mask=triu(ones(S,S,bool),1) (causal)' if causal else '')
            + f'. Special value: {what}; {tensor}{list(idx)} = {value}.')
    order = ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']
    sd_lines = [f'    {json.dumps(k)}: {mf.array_text(state32[k].reshape(-1).numpy(), f32s)}' for k in order]
    special = {'tensor': tensor, 'index': flat_index, 'value': 'NaN' if math.isnan(value) else ('Infinity' if value > 0 else '-Infinity')}
    text = '{\n' + ',\n'.join([
        f'  "description": {json.dumps(desc)}',
        f'  "torch_version": {json.dumps(torch.__version__)}',
        f'  "config": {json.dumps({"embedDim": E, "numHeads": H, "bias": True})}',
        f'  "options": {json.dumps({"batchSize": B, "seqLen": S, "isCausal": causal, "needWeights": True})}',
        f'  "special": {json.dumps(special)}',
        '  "stateDict": {\n' + ',\n'.join(sd_lines) + '\n  }',
        f'  "query": {mf.array_text(query32.reshape(-1).numpy(), f32s)}',
        f'  "output": {mf.array_text(out.reshape(-1).numpy(), f64s)}',
        f'  "attentionWeights": {mf.array_text(probs.reshape(-1).numpy(), f64s)}',
    ]) + '\n}\n'

    # Read it back the way the test will, and check every value (NaN for NaN).
    back = json.loads(text)
    for k in state32:
        got = torch.tensor([parse_special(v) for v in back['stateDict'][k]], dtype=torch.float64).float()
        assert same(got, state32[k].reshape(-1)), k
    assert same(torch.tensor([parse_special(v) for v in back['query']], dtype=torch.float64).float(), query32.reshape(-1))
    assert same(torch.tensor([parse_special(v) for v in back['output']], dtype=torch.float64), out.reshape(-1))
    assert same(torch.tensor([parse_special(v) for v in back['attentionWeights']], dtype=torch.float64), probs.reshape(-1))

    path = os.path.join(OUT_DIR, name + '.json')
    with open(path, 'w') as f:
        f.write(text)
    nan_rows = torch.isnan(out).any(-1).int().tolist()
    return path, len(text), int(torch.isnan(out).sum()), int(torch.isinf(out).sum()), nan_rows


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_grad_enabled(False)
    total = 0
    for i, case in enumerate(CASES):
        path, size, nans, infs, rows = make_case(i, *case)
        total += size
        print(f'{os.path.relpath(path)}  {size / 1024:.1f} KiB  output NaN {nans}, ±Inf {infs}; rows with a NaN {rows}')
    print(f'{len(CASES)} fixtures, {total / 1024:.1f} KiB, torch {torch.__version__}', file=sys.stderr)


if __name__ == '__main__':
    main()
