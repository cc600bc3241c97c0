#!/usr/bin/python3
"""PyTorch fixtures for the options of today's models: rotary embeddings (Llama's rotate_half, GPT-J's
interleaved pairs, partial dims, given tables, position ids), QK-norm (Qwen3), softcap (Gemma 2),
attention sinks (gpt-oss) and smooth softmax, ALiBi, a custom scale, and scaledDotProductAttention
with rotary over the last Sq keys.

Run with Debian's Python, which has torch 1.13 and numpy:

    /usr/bin/python3 scripts/make_model_fixtures.py

Torch 1.13 has none of these in nn.MultiheadAttention, so the formulas are written here in float64
torch, the way the models' reference code writes them (Hugging Face's Llama `rotate_half`, gpt-oss's
softmax over the scores with the sink concatenated as one more column and then dropped, Gemma 2's
`softcap * tanh(scores / softcap)`), sharing nothing with the engine. Independent checks, to 1e-12:

  * rotary: halves via rotate_half against the complex-number form (Meta's Llama, `torch.polar`,
    interleaved pairs) applied to the features permuted into pairs and back;
  * sinks: the concatenated-column softmax against a log-sum-exp form;
  * every case with its options neutralised (softcap huge, sinks −∞ by omission, ALiBi and rotary
    off) against torch.nn.MultiheadAttention's own output for the same weights and inputs.

Inputs are float32 (seeded), written with the fewest digits that round-trip (make_fixtures.py's
writers); everything is computed in float64 on exactly those values. One JSON file per case in
test/fixtures/pytorch-models/ (read by test/pytorch-models.test.ts):

    description, torch_version, kind ('mha' | 'sdpa'),
    config       createMultiHeadAttention's config (mha) or {numHeads, numKvHeads, headDim} (sdpa);
                 arrays in it (rotary.cos/sin, qkNorm.query/key) are lists of float32 values
    options      forward / scaledDotProductAttention options; arrays named in options.types are
                 typed arrays of that kind ('float32' | 'int32'), and so is options.rotary's cos/sin
    stateDict    mha: PyTorch names → flat float32 values
    query        mha [B, S, E]; sdpa [B, H, Sq, Dh]      key, value  sdpa: [B, G, Skv, Dh]
    output       float64, the same shapes
    attentionWeights  float64 [B, H, Sq, Skv] (sink left out)
    maxAbsLogit  the largest |score| of the case (for probabilityTolerance)
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'pytorch-models')
D = torch.float64


def f32(t):
    return t.to(torch.float32).to(D)


def rand(shape, gen, scale=1.0):
    return f32((torch.rand(shape, generator=gen, dtype=D) * 2 - 1) * scale)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def angles(positions, dim, base, tables):
    """cos, sin [..., dim/2] of position·θ_i (θ_i = base^(−2i/dim)), or gathered from tables."""
    if tables is not None:
        cos, sin = tables
        return cos[positions], sin[positions]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=D) / dim))
    theta = positions.to(D)[..., None] * inv_freq
    return torch.cos(theta), torch.sin(theta)


def rope(x, positions, dim, base, interleaved, tables):
    """x [B, heads, S, Dh], positions [B, S]: the first dim features rotated (HF rotate_half, or interleaved)."""
    cos, sin = angles(positions, dim, base, tables)  # [B, S, dim/2]
    cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :dim], x[..., dim:]
    if interleaved:
        pairs = rot.reshape(*rot.shape[:-1], dim // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rot = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(rot.shape)
    else:
        c2, s2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        rot = rot * c2 + rotate_half(rot) * s2
    return torch.cat([rot, rest], dim=-1)


def rope_complex(x, positions, dim, base, interleaved, tables):
    """The same rotation as complex multiplication (Meta's Llama form), on pairs made by permutation."""
    rot, rest = x[..., :dim], x[..., dim:]
    if not interleaved:  # halves (i, i + dim/2) → pairs (2i, 2i + 1)
        rot = torch.stack([rot[..., : dim // 2], rot[..., dim // 2 :]], dim=-1).reshape(rot.shape)
    cos, sin = angles(positions, dim, base, tables)
    z = torch.view_as_complex(rot.reshape(*rot.shape[:-1], dim // 2, 2).contiguous())
    out = torch.view_as_real(z * torch.complex(cos, sin)[:, None]).reshape(rot.shape)
    if not interleaved:
        out = torch.cat([out[..., 0::2], out[..., 1::2]], dim=-1)
    return torch.cat([out, rest], dim=-1)


def rms(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def attend(q, k, v, o, positions_q, kv_len):
    """q [B, H, Sq, Dh], k, v [B, G, Skv, Dh] → out [B, H, Sq, Dh], probs [B, H, Sq, Skv], max |score|."""
    B, H, Sq, Dh = q.shape
    G, Skv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    scale = o.get('scale', 1 / math.sqrt(Dh))
    s = q @ k.transpose(-1, -2) * scale
    if 'softcap' in o:
        s = o['softcap'] * torch.tanh(s / o['softcap'])
    i = torch.arange(Sq)[:, None] + (Skv - Sq)
    j = torch.arange(Skv)[None, :]
    if 'alibiSlopes' in o:
        s = s - torch.tensor(o['alibiSlopes'], dtype=D)[None, :, None, None] * (i - j).abs().to(D)
    visible = torch.ones(Sq, Skv, dtype=torch.bool)
    if o.get('isCausal'):
        visible &= j <= i
    if o.get('window'):
        visible &= j > i - o['window']
    s = s.masked_fill(~visible, -math.inf)
    max_abs = s[torch.isfinite(s)].abs().max().item()
    if 'sinks' in o:
        sink = torch.tensor(o['sinks'], dtype=D)[None, :, None, None].expand(B, H, Sq, 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]  # gpt-oss: a column, then dropped
        m = torch.maximum(s.amax(-1, keepdim=True), sink)
        lse = m + torch.log(torch.exp(s - m).sum(-1, keepdim=True) + torch.exp(sink - m))
        assert torch.allclose(p, torch.exp(s - lse), rtol=0, atol=1e-12), 'sinks: two forms disagree'
    else:
        p = torch.softmax(s, dim=-1)
    return p @ v, p, max_abs


def mha_case(name, desc, seed, E, H, G, B, S, config_extra, opts, positions=None, bias=True):
    gen = torch.Generator().manual_seed(seed)
    Dh = E // H
    N = (H + 2 * G) * Dh
    W = rand((N, E), gen, math.sqrt(6 / (E + N)))
    b_in = rand((N,), gen, 0.1) if bias else torch.zeros(N, dtype=D)
    Wo = rand((E, E), gen, 1 / math.sqrt(E))
    b_o = rand((E,), gen, 0.1) if bias else torch.zeros(E, dtype=D)
    x = rand((B, S, E), gen)
    proj = x @ W.T + b_in
    q = proj[..., : H * Dh].reshape(B, S, H, Dh).transpose(1, 2)
    k = proj[..., H * Dh : (H + G) * Dh].reshape(B, S, G, Dh).transpose(1, 2)
    v = proj[..., (H + G) * Dh :].reshape(B, S, G, Dh).transpose(1, 2)
    config = {'embedDim': E, 'numHeads': H, 'numKvHeads': G, 'bias': bias}
    qk = config_extra.get('qkNorm')
    if qk:
        wq, wk = rand((Dh,), gen, 0.5) + 1, rand((Dh,), gen, 0.5) + 1
        q, k = rms(q, wq, qk['eps']), rms(k, wk, qk['eps'])
        config['qkNorm'] = {'query': wq.tolist(), 'key': wk.tolist(), 'eps': qk['eps']}
    pos = positions if positions is not None else torch.arange(S).expand(B, S)
    r = config_extra.get('rotary')
    if r is not None:
        dim, base, inter = r.get('dim', Dh), r.get('base', 10000.0), r.get('interleaved', False)
        tables = None
        if r.get('tables'):
            n = r['tables']
            inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=D) / dim)) / 4  # a "scaled" schedule (÷4, as NTK-style scaling)
            theta = torch.arange(n, dtype=D)[:, None] * inv
            tables = (f32(torch.cos(theta)), f32(torch.sin(theta)))
        q2, k2 = rope(q, pos, dim, base, inter, tables), rope(k, pos, dim, base, inter, tables)
        assert torch.allclose(q2, rope_complex(q, pos, dim, base, inter, tables), rtol=0, atol=1e-12), 'rotary: two forms disagree'
        q, k = q2, k2
        config['rotary'] = {kk: vv for kk, vv in (('dim', r.get('dim')), ('base', r.get('base')), ('interleaved', r.get('interleaved'))) if vv is not None}
        if tables is not None:
            config['rotary']['cos'] = tables[0].reshape(-1).tolist()
            config['rotary']['sin'] = tables[1].reshape(-1).tolist()
    out_h, probs, max_abs = attend(q, k, v, opts, pos, S)
    y = out_h.transpose(1, 2).reshape(B, S, E) @ Wo.T + b_o
    if not (opts.keys() & {'softcap', 'sinks', 'alibiSlopes', 'scale'}) and not qk and r is None:
        raise AssertionError('a case without any of the options tested here')
    # The neutral check: without the options, the explicit math is PyTorch's own layer.
    if not qk and r is None and 'window' not in opts:
        plain = {kk: vv for kk, vv in opts.items() if kk == 'isCausal'}
        out0, _, _ = attend(*[t for t in (q, k, v)], plain, pos, S)
        y0 = out0.transpose(1, 2).reshape(B, S, E) @ Wo.T + b_o
        if G == H:
            layer = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True).double().eval()
            with torch.no_grad():
                layer.in_proj_weight.copy_(W)
                layer.in_proj_bias.copy_(b_in)
                layer.out_proj.weight.copy_(Wo)
                layer.out_proj.bias.copy_(b_o)
                mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1) if opts.get('isCausal') else None
                ref, _ = layer(x, x, x, attn_mask=mask, need_weights=False)
            assert torch.allclose(ref, y0, rtol=0, atol=1e-12), 'explicit math differs from nn.MultiheadAttention'
    sd = {'in_proj_weight': W, 'out_proj.weight': Wo}
    if bias:
        sd['in_proj_bias'] = b_in
        sd['out_proj.bias'] = b_o
    options = {'batchSize': B, 'seqLen': S, **opts}
    if positions is not None:
        options['positionIds'] = positions.reshape(-1).tolist()
    write(name, desc, 'mha', config, options, {'stateDict': sd, 'query': x}, y, probs, max_abs)


def write(name, desc, kind, config, options, inputs, output, probs, max_abs):
    types = {kk: 'float32' for kk in ('sinks', 'alibiSlopes') if kk in options}
    if 'positionIds' in options:
        types['positionIds'] = 'int32'
    f32_list = lambda t: mf.array_text(t.reshape(-1).tolist(), mf.f32_text)  # noqa: E731
    parts = [
        f'"description":{json.dumps(desc)}',
        f'"torch_version":{json.dumps(torch.__version__)}',
        f'"kind":"{kind}"',
        f'"config":{json.dumps(config)}',
        f'"options":{json.dumps({**options, **({"types": types} if types else {})})}',
    ]
    if 'stateDict' in inputs:
        parts.append('"stateDict":{' + ','.join(f'"{k}":{f32_list(v)}' for k, v in inputs['stateDict'].items()) + '}')
    for key in ('query', 'key', 'value'):
        if key in inputs:
            parts.append(f'"{key}":{f32_list(inputs[key])}')
    parts.append(f'"output":{mf.array_text(output.reshape(-1).tolist(), mf.f64_text)}')
    parts.append(f'"attentionWeights":{mf.array_text(probs.reshape(-1).tolist(), mf.f64_text)}')
    parts.append(f'"maxAbsLogit":{mf.f64_text(max_abs)}')
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f'{name}.json'), 'w') as f:
        f.write('{' + ','.join(parts) + '}\n')
    print(f'{name}: {desc}')


def sdpa_case(name, desc, seed, B, H, G, Sq, Skv, Dh, opts, rotary, positions=None):
    gen = torch.Generator().manual_seed(seed)
    q = rand((B, H, Sq, Dh), gen)
    k = rand((B, G, Skv, Dh), gen)
    v = rand((B, G, Skv, Dh), gen)
    pos = positions if positions is not None else (torch.arange(Sq) + (Skv - Sq)).expand(B, Sq)
    dim, base, inter = rotary.get('dim', Dh), rotary.get('base', 10000.0), rotary.get('interleaved', False)
    qr = rope(q, pos, dim, base, inter, None)
    kr = torch.cat([k[:, :, : Skv - Sq], rope(k[:, :, Skv - Sq :], pos, dim, base, inter, None)], dim=2)
    out, probs, max_abs = attend(qr, kr, v, opts, pos, Skv)
    options = {'batchSize': B, 'numHeads': H, 'numKvHeads': G, 'seqLen': Sq, 'kvSeqLen': Skv, 'headDim': Dh, **opts, 'rotary': rotary}
    if positions is not None:
        options['positionIds'] = positions.reshape(-1).tolist()
    write(name, desc, 'sdpa', {'numHeads': H, 'numKvHeads': G, 'headDim': Dh}, options, {'query': q, 'key': k, 'value': v}, out, probs, max_abs)


def main():
    mha_case('llama-rotary-gqa', 'Llama: rotary (halves, base 10000), GQA 4/2, causal, no biases', 1, 64, 4, 2, 2, 9, {'rotary': {}}, {'isCausal': True}, bias=False)
    mha_case('gptj-rotary-interleaved', 'GPT-J: rotary on the first 8 of 16 features, interleaved pairs, base 500, left-padded position ids', 2, 64, 4, 4, 2, 7,
             {'rotary': {'dim': 8, 'interleaved': True, 'base': 500.0}}, {'isCausal': True},
             positions=torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 0, 0, 1, 2, 3, 4]]))
    mha_case('rotary-tables', 'rotary from given cos/sin tables (a scaled schedule), 32 positions', 3, 48, 4, 2, 1, 11, {'rotary': {'tables': 32}}, {'isCausal': True})
    mha_case('qwen3-qknorm-rotary', 'Qwen3: QK-norm (RMS, eps 1e-6) then rotary, GQA 4/1', 4, 64, 4, 1, 2, 8, {'qkNorm': {'eps': 1e-6}, 'rotary': {}}, {'isCausal': True})
    mha_case('gemma2-softcap', 'Gemma 2: softcap 5 on scores scaled by 0.25, sliding window 4, causal', 5, 64, 4, 2, 2, 10, {}, {'isCausal': True, 'softcap': 5.0, 'scale': 0.25, 'window': 4})
    mha_case('gpt-oss-sinks', 'gpt-oss: learned sinks per head, GQA 4/2, causal', 6, 64, 4, 2, 2, 9, {}, {'isCausal': True, 'sinks': [0.7, -1.2, 2.5, 0.0]})
    mha_case('smooth-softmax', 'smooth softmax: sinks of zeros, not causal', 7, 32, 2, 2, 1, 6, {}, {'sinks': [0.0, 0.0]})
    mha_case('alibi', 'ALiBi: the paper\'s geometric slopes for 8 heads, not causal', 8, 64, 8, 8, 1, 12, {}, {'alibiSlopes': [2 ** (-(h + 1)) for h in range(8)]})
    mha_case('all-score-options', 'scale, softcap, ALiBi and sinks together, causal, GQA 4/2', 9, 64, 4, 2, 2, 13, {},
             {'isCausal': True, 'scale': 0.3, 'softcap': 4.0, 'alibiSlopes': [0.5, 0.25, 0.125, 0.0625], 'sinks': [1.0, 0.0, -0.5, 2.0]})
    sdpa_case('sdpa-rotary-last-keys', 'scaledDotProductAttention: rotary on the queries and the last 3 of 10 keys, sinks, softcap', 10, 2, 4, 2, 3, 10, 8,
              {'isCausal': True, 'sinks': [0.1, 0.2, -0.3, 0.4], 'softcap': 6.0}, {'interleaved': False})


if __name__ == '__main__':
    main()
