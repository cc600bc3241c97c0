#!/usr/bin/python3
"""PyTorch fixtures for linear attention: engine.linearAttention and layers with attention 'linear'.

Run with Debian's Python, which has torch 1.13:

    /usr/bin/python3 scripts/make_linear_fixtures.py

The oracle is the LinearAttention module below, the elu(x) + 1 feature-map attention of Katharopoulos
et al. 2020 ("Transformers are RNNs") as PyTorch tutorials write it, in float64: einsum over all keys
when not causal, torch.cumsum prefix sums when causal (row i of Sq queries aligned to key
i + Skv - Sq), padded keys zeroed in phi(K). It shares nothing with the engine, whose GPU kernels
sum chunks of keys and whose CPU backend keeps running sums. Independent check, to 1e-12: every case
against the quadratic form (an explicit [Sq, Skv] matrix of phi(q_i).phi(k_j), masked and normalised
by its row sums + eps).

Inputs are float32 (seeded), written with the fewest digits that round-trip; everything is computed
in float64 on exactly those values. One JSON file per case in test/fixtures/pytorch-linear/ (read by
test/linear-attention.test.ts), with the fields of make_model_fixtures.py's files (kind 'mha' with
config.attention = 'linear', or 'linear' for engine.linearAttention; no attentionWeights).
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'pytorch-linear')
D = torch.float64


class LinearAttention(nn.Module):
    """Linear attention with the feature map elu(x) + 1: O(S * Dh^2), no softmax, no scaling."""

    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    @staticmethod
    def feature_map(x):
        return F.elu(x) + 1

    def forward(self, q, k, v, causal=False, key_padding_mask=None):
        # q [B, H, Sq, Dh]; k, v [B, H, Skv, Dh] (key/value heads already repeated for GQA)
        Q = self.feature_map(q)
        K = self.feature_map(k)
        if key_padding_mask is not None:  # [B, Skv], True = leave the key out
            K = K.masked_fill(key_padding_mask[:, None, :, None], 0.0)
        if not causal:
            KV = torch.einsum('bhsd,bhse->bhde', K, v)
            Z = 1.0 / (torch.einsum('bhld,bhd->bhl', Q, K.sum(dim=2)) + self.eps)
            return torch.einsum('bhld,bhde,bhl->bhle', Q, KV, Z)
        Sq, Skv = q.shape[2], k.shape[2]
        KV = torch.cumsum(torch.einsum('bhsd,bhse->bhsde', K, v), dim=2)  # sums over keys 0 … j
        Ksum = torch.cumsum(K, dim=2)
        last = torch.arange(Sq) + (Skv - Sq)  # the last key row i sees
        seen = last >= 0
        idx = last.clamp(min=0)
        num = torch.einsum('bhld,bhlde->bhle', Q, KV[:, :, idx]) * seen[None, None, :, None]
        den = torch.einsum('bhld,bhld->bhl', Q, Ksum[:, :, idx]) * seen[None, None, :]
        return num / (den + self.eps)[..., None]


def quadratic(q, k, v, causal, pad, eps):
    """The same attention as an explicit [Sq, Skv] matrix: the check of LinearAttention."""
    A = torch.einsum('bhid,bhjd->bhij', F.elu(q) + 1, F.elu(k) + 1)
    Sq, Skv = q.shape[2], k.shape[2]
    allowed = torch.ones(Sq, Skv, dtype=torch.bool)
    if causal:
        allowed = torch.arange(Skv)[None, :] <= (torch.arange(Sq) + Skv - Sq)[:, None]
    A = A * allowed
    if pad is not None:
        A = A * (~pad)[:, None, None, :]
    return (A @ v) / (A.sum(-1, keepdim=True) + eps)


def f32(t):
    return t.to(torch.float32).to(D)


def rand(shape, gen, scale=1.0):
    return f32((torch.rand(shape, generator=gen, dtype=D) * 2 - 1) * scale)


def run(q, k, v, H, G, causal, pad, eps):
    kr, vr = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    out = LinearAttention(eps)(q, kr, vr, causal, pad)
    check = quadratic(q, kr, vr, causal, pad, eps)
    assert torch.allclose(out, check, rtol=0, atol=1e-12), 'LinearAttention and the quadratic form disagree'
    return out


def padding(gen, B, Skv, count):
    pad = torch.zeros(B, Skv, dtype=torch.bool)
    for b in range(B):
        pad[b, torch.randperm(Skv, generator=gen)[:count]] = True
    return pad


def write(name, desc, kind, config, options, inputs, output):
    f32_list = lambda t: mf.array_text(t.reshape(-1).tolist(), mf.f32_text)  # noqa: E731
    types = {'keyPaddingMask': 'uint8'} if 'keyPaddingMask' in options else {}
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
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, f'{name}.json'), 'w') as f:
        f.write('{' + ','.join(parts) + '}\n')
    print(f'{name}: {desc}')


def linear_case(name, desc, seed, B, H, G, Sq, Skv, Dh, causal, pad_count=0, eps=1e-6, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = rand((B, H, Sq, Dh), gen, scale), rand((B, G, Skv, Dh), gen, scale), rand((B, G, Skv, Dh), gen)
    pad = padding(gen, B, Skv, pad_count) if pad_count else None
    out = run(q, k, v, H, G, causal, pad, eps)
    options = {'batchSize': B, 'numHeads': H, 'numKvHeads': G, 'seqLen': Sq, 'kvSeqLen': Skv, 'headDim': Dh, 'isCausal': causal}
    if pad is not None:
        options['keyPaddingMask'] = pad.to(torch.uint8).reshape(-1).tolist()
    if eps != 1e-6:
        options['eps'] = eps
    write(name, desc, 'linear', {'numHeads': H, 'numKvHeads': G, 'headDim': Dh}, options, {'query': q, 'key': k, 'value': v}, out)


def layer_case(name, desc, seed, E, H, G, B, S, causal, pad_count=0, bias=True):
    gen = torch.Generator().manual_seed(seed)
    Dh = E // H
    N = (H + 2 * G) * Dh
    W = rand((N, E), gen, math.sqrt(6 / (E + N)))
    b_in = rand((N,), gen, 0.1) if bias else torch.zeros(N, dtype=D)
    Wo = rand((E, E), gen, 1 / math.sqrt(E))
    b_o = rand((E,), gen, 0.1) if bias else torch.zeros(E, dtype=D)
    x = rand((B, S, E), gen, 2.0)
    proj = x @ W.T + b_in
    q = proj[..., : H * Dh].reshape(B, S, H, Dh).transpose(1, 2)
    k = proj[..., H * Dh : (H + G) * Dh].reshape(B, S, G, Dh).transpose(1, 2)
    v = proj[..., (H + G) * Dh :].reshape(B, S, G, Dh).transpose(1, 2)
    pad = padding(gen, B, S, pad_count) if pad_count else None
    out_h = run(q, k, v, H, G, causal, pad, 1e-6)
    y = out_h.transpose(1, 2).reshape(B, S, E) @ Wo.T + b_o
    sd = {'in_proj_weight': W, 'out_proj.weight': Wo}
    if bias:
        sd['in_proj_bias'] = b_in
        sd['out_proj.bias'] = b_o
    options = {'batchSize': B, 'seqLen': S, 'isCausal': causal}
    if pad is not None:
        options['keyPaddingMask'] = pad.to(torch.uint8).reshape(-1).tolist()
    config = {'embedDim': E, 'numHeads': H, 'numKvHeads': G, 'bias': bias, 'attention': 'linear'}
    write(name, desc, 'mha', config, options, {'stateDict': sd, 'query': x}, y)


def main():
    linear_case('linear-plain', 'linearAttention, not causal, B=2 H=4 S=37 Dh=16', 1, 2, 4, 4, 37, 37, 16, False)
    linear_case('linear-causal-gqa', 'causal, GQA 4/2, S=150 (more than two 64-key chunks, not a multiple), Dh=8', 2, 1, 4, 2, 150, 150, 8, True)
    linear_case('linear-causal-decode', 'causal, 5 queries over 90 keys (aligned to the end, as a KV cache decodes), 7 padded keys', 3, 2, 2, 1, 5, 90, 12, True, pad_count=7)
    linear_case('linear-cross-padded-odd', 'not causal, 40 queries over 70 keys, 9 padded keys, Dh=6 (padded to 8 on WebGPU)', 4, 2, 3, 3, 40, 70, 6, False, pad_count=9)
    linear_case('linear-causal-long-eps', 'causal, S=200, eps 0.5, Dh=5, MQA 2/1', 5, 1, 2, 1, 200, 200, 5, True, eps=0.5)
    linear_case('linear-more-queries', 'causal, 30 queries over 20 keys: the first 10 rows see nothing (output 0)', 6, 1, 2, 2, 30, 20, 8, True)
    layer_case('linear-layer-causal', "MultiHeadAttention with attention 'linear', causal, GQA 4/2, B=2 S=80, padded keys", 7, 32, 4, 2, 2, 80, True, pad_count=5)
    layer_case('linear-layer-plain', "attention 'linear', not causal, E=24 H=3, B=1 S=20, no biases", 8, 24, 3, 3, 1, 20, False, bias=False)


if __name__ == '__main__':
    main()
