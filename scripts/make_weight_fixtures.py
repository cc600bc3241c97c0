#!/usr/bin/python3
"""Weight-file fixtures: small .safetensors files in the layouts of real checkpoints, with PyTorch
reference outputs, for test/weights.test.ts.

Run with Debian's Python, which has torch 1.13 and numpy (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 scripts/make_weight_fixtures.py

There is no safetensors package here, so the files are written by `write_safetensors` below, following
the format of https://github.com/huggingface/safetensors: an 8-byte little-endian u64 N, N bytes of
compact JSON header {"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets": [begin, end]}}
padded with spaces to a multiple of 8 bytes (as the reference writer does), then the tensors' raw
little-endian row-major bytes, back to back in the order the reference writer uses (larger dtypes
first, then by name); offsets are relative to the end of the header. Every file is read back with an
independent little reader (`read_safetensors`) and compared value by value.

Written to test/fixtures/weights/:

  pytorch_mha.safetensors        nn.MultiheadAttention(16, 4).state_dict() under the prefix
                                 "encoder.layers.0.self_attn." beside other layer tensors (F32)
  bert_attention.safetensors     Hugging Face BERT names under "bert.encoder.layer.0.": attention.self.
                                 {query,key,value}, attention.output.dense (torch.nn.Linear, [out, in]),
                                 attention.output.LayerNorm, and an I64 embeddings.position_ids (F32 + I64)
  gpt2_attention.safetensors     GPT-2 names under "h.0.": attn.c_attn / attn.c_proj as Conv1D weights
                                 [in, out] (y = x·W + b), the attn.bias causal-mask buffer, ln_1 (F32 + U8)
  pytorch_mha_f16.safetensors    an nn.MultiheadAttention(8, 2) state dict stored as F16, and a tensor
                                 "special" of edge values (signed zero, subnormals, max, ±inf, NaN)
  pytorch_mha_bf16.safetensors   the same as BF16
  pytorch_mha_f64_nobias.safetensors  nn.MultiheadAttention(8, 2, bias=False) as F64 (values that need
                                 rounding to float32) and an F64 "special" tensor
  <each>.json                    config, layout, prefix, forward options, query [B, S, E] (float32
                                 values), output [B, S, E] (float64 reference), and for the F16/BF16/F64
                                 files "decoded": every tensor as torch's .float() gives it
  numpy_style.json               matmul-style weights ([in, out], x @ W) fused W_qkv [E, 3E], W_O, biases,
                                 and the output of a per-head numpy-tutorial forward in float64
  broken/*.safetensors           deliberately broken files: truncated data, truncated header, header not
                                 JSON, header not an object, a field missing, an unknown dtype string,
                                 offsets out of bounds, offsets not matching dtype x shape

References are computed in float64 on exactly the float32 (or F16/BF16-rounded) values in the files:
pytorch with torch.nn.MultiheadAttention itself (.double(), eval); BERT with plain torch math equal to
BertSelfAttention + BertSelfOutput.dense (no dropout, residual or LayerNorm; the padding mask as
HF's additive extended mask, whose large negative value gives probability exactly 0 in float64, as
-inf does); GPT-2 with GPT2Attention's math (c_attn, split, causal softmax(QKᵀ/√Dh), merge, c_proj).
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import f64_text  # noqa: E402  (the same 17-digit float64 writer)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'weights')

# ——— the safetensors format ———

DTYPE_OF = {torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16', torch.float64: 'F64',
            torch.int64: 'I64', torch.uint8: 'U8'}
ITEMSIZE = {'F32': 4, 'F16': 2, 'BF16': 2, 'F64': 8, 'I64': 8, 'U8': 1}


def tensor_bytes(t):
    """Raw little-endian row-major bytes of a tensor (bfloat16 through its int16 bit pattern)."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype('<i2').tobytes()
    np_dtype = {torch.float32: '<f4', torch.float16: '<f2', torch.float64: '<f8', torch.int64: '<i8', torch.uint8: 'u1'}[t.dtype]
    return t.numpy().astype(np_dtype).tobytes()


def encode_safetensors(tensors, metadata=None, header_override=None):
    """bytes of a safetensors file; `header_override(header dict)` may damage the header (broken files)."""
    order = sorted(tensors, key=lambda n: (-ITEMSIZE[DTYPE_OF[tensors[n].dtype]], n))
    header = {}
    if metadata is not None:
        header['__metadata__'] = metadata
    chunks = []
    offset = 0
    for name in order:
        t = tensors[name]
        data = tensor_bytes(t)
        header[name] = {'dtype': DTYPE_OF[t.dtype], 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if header_override:
        header = header_override(header)
    text = header if isinstance(header, str) else json.dumps(header, separators=(',', ':'))
    raw = text.encode('utf-8')
    raw += b' ' * ((8 - len(raw) % 8) % 8)
    return struct.pack('<Q', len(raw)) + raw + b''.join(chunks)


def read_safetensors(data):
    """An independent reader, used to check every file written (numpy only)."""
    (n,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + n].decode('utf-8'))
    out = {}
    for name, e in header.items():
        if name == '__metadata__':
            continue
        begin, end = e['data_offsets']
        raw = data[8 + n + begin: 8 + n + end]
        if e['dtype'] == 'BF16':
            bits = np.frombuffer(raw, dtype='<u2').astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype={'F32': '<f4', 'F16': '<f2', 'F64': '<f8', 'I64': '<i8', 'U8': 'u1'}[e['dtype']])
        out[name] = (e['dtype'], arr.reshape(e['shape']))
    return out


def save(path, tensors, metadata=None):
    data = encode_safetensors(tensors, metadata if metadata is not None else {'format': 'pt'})
    back = read_safetensors(data)
    assert set(back) == set(tensors)
    for name, t in tensors.items():
        dtype, arr = back[name]
        assert dtype == DTYPE_OF[t.dtype]
        ref = t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
        assert np.array_equal(arr.astype(np.float64), ref.astype(np.float64), equal_nan=True), name
    with open(path, 'wb') as f:
        f.write(data)
    return len(data)


# ——— numbers as JSON text ———

def f32_text(x):
    """Shortest decimal that JSON.parse + Float32Array turn back into this float32 (specials as strings)."""
    f = np.float32(x)
    if math.isnan(f):
        return '"NaN"'
    if math.isinf(f):
        return '"Infinity"' if f > 0 else '"-Infinity"'
    candidates = [np.format_float_positional(f, unique=True, trim='-'),
                  np.format_float_scientific(f, unique=True, trim='-').replace('e+', 'e')]
    candidates = [c.replace('e0', 'e').replace('e-0', 'e-') for c in candidates]
    ok = [c for c in candidates if np.float32(float(c)) == f and math.copysign(1, float(c)) == math.copysign(1, f)]
    if not ok:
        ok = [repr(float(f))]
    return min(ok, key=len)


def arr(values, fmt=f32_text):
    return '[' + ','.join(fmt(v) for v in np.asarray(values).reshape(-1)) + ']'


def write_json(name, fields):
    """fields: list of (key, already-encoded JSON text)."""
    text = '{\n' + ',\n'.join(f'  {json.dumps(k)}: {v}' for k, v in fields) + '\n}\n'
    json.loads(text)
    with open(os.path.join(OUT_DIR, name), 'w') as f:
        f.write(text)
    return len(text)


def common_fields(description, file, layout, prefix, config, options, query32, output64):
    assert output64.dtype == torch.float64
    return [
        ('description', json.dumps(description)),
        ('torch_version', json.dumps(torch.__version__)),
        ('file', json.dumps(file)),
        ('layout', json.dumps(layout)),
        ('prefix', json.dumps(prefix)),
        ('config', json.dumps(config)),
        ('options', json.dumps(options)),
        ('query', arr(query32.numpy())),
        ('output', arr(output64.numpy(), f64_text)),
    ]


def uniform_(t, bound):
    with torch.no_grad():
        t.uniform_(-bound, bound)
    return t


# ——— cases ———

def pytorch_mha_case(sizes):
    E, H, B, S = 16, 4, 2, 5
    torch.manual_seed(2001)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    uniform_(mha.in_proj_bias, 1 / math.sqrt(E))
    uniform_(mha.out_proj.bias, 1 / math.sqrt(E))
    query = torch.randn(B, S, E, dtype=torch.float32)
    prefix = 'encoder.layers.0.self_attn.'
    tensors = {prefix + k: v.detach().clone() for k, v in mha.state_dict().items()}
    # Other tensors of a TransformerEncoderLayer, as a real checkpoint has them.
    tensors['encoder.layers.0.linear1.weight'] = torch.randn(8, E)
    tensors['encoder.layers.0.norm1.weight'] = torch.ones(E)
    tensors['encoder.layers.0.norm1.bias'] = torch.zeros(E)
    sizes.append(save(os.path.join(OUT_DIR, 'pytorch_mha.safetensors'), tensors))
    m64 = mha.double().eval()
    q64 = query.double()
    out, _ = m64(q64, q64, q64, need_weights=False)
    sizes.append(write_json('pytorch_mha.json', common_fields(
        f'torch.nn.MultiheadAttention({E}, {H}, batch_first=True).state_dict() under "{prefix}" (seed 2001), '
        'run in float64 (.double(), eval) on the float32 weights and query.',
        'pytorch_mha.safetensors', 'pytorch', prefix, {'embedDim': E, 'numHeads': H, 'bias': True},
        {'batchSize': B, 'seqLen': S, 'isCausal': False}, query, out)))


def bert_case(sizes):
    E, H, B, S = 32, 4, 2, 6
    Dh = E // H
    torch.manual_seed(2002)
    lin = {n: torch.nn.Linear(E, E) for n in ['query', 'key', 'value', 'dense']}  # float32, [out, in]
    for m in lin.values():
        uniform_(m.bias, 1 / math.sqrt(E))
    hidden = torch.randn(B, S, E, dtype=torch.float32)
    attention_mask = torch.ones(B, S, dtype=torch.int64)
    attention_mask[1, S - 2:] = 0  # the second sequence is padded: its last two tokens are padding
    p = 'bert.encoder.layer.0.'
    tensors = {}
    for n in ['query', 'key', 'value']:
        tensors[f'{p}attention.self.{n}.weight'] = lin[n].weight.detach().clone()
        tensors[f'{p}attention.self.{n}.bias'] = lin[n].bias.detach().clone()
    tensors[f'{p}attention.output.dense.weight'] = lin['dense'].weight.detach().clone()
    tensors[f'{p}attention.output.dense.bias'] = lin['dense'].bias.detach().clone()
    tensors[f'{p}attention.output.LayerNorm.weight'] = torch.ones(E)
    tensors[f'{p}attention.output.LayerNorm.bias'] = torch.zeros(E)
    tensors['bert.embeddings.position_ids'] = torch.arange(16, dtype=torch.int64).reshape(1, 16)
    sizes.append(save(os.path.join(OUT_DIR, 'bert_attention.safetensors'), tensors))

    # BertSelfAttention + BertSelfOutput.dense in float64 on the float32 weights.
    x = hidden.double()
    W = {n: (lin[n].weight.detach().double(), lin[n].bias.detach().double()) for n in lin}

    def heads(t):  # transpose_for_scores: [B, S, E] -> [B, H, S, Dh]
        return t.view(B, S, H, Dh).permute(0, 2, 1, 3)

    q, k, v = (heads(x @ W[n][0].T + W[n][1]) for n in ['query', 'key', 'value'])
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    extended = (1.0 - attention_mask[:, None, None, :].double()) * torch.finfo(torch.float64).min
    probs = torch.softmax(scores + extended, dim=-1)
    context = (probs @ v).permute(0, 2, 1, 3).reshape(B, S, E)
    out = context @ W['dense'][0].T + W['dense'][1]
    # The same through nn.MultiheadAttention with the weights stacked: a check of this reference only.
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double().eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W[n][0] for n in ['query', 'key', 'value']]))
        mha.in_proj_bias.copy_(torch.cat([W[n][1] for n in ['query', 'key', 'value']]))
        mha.out_proj.weight.copy_(W['dense'][0])
        mha.out_proj.bias.copy_(W['dense'][1])
    check, _ = mha(x, x, x, key_padding_mask=attention_mask == 0, need_weights=False)
    assert torch.allclose(check, out, rtol=0, atol=1e-12), (check - out).abs().max()

    fields = common_fields(
        f'Hugging Face BERT attention names under "{p}" from torch.nn.Linear({E}, {E}) modules (seed 2002); '
        'reference: BertSelfAttention + BertSelfOutput.dense (no dropout/residual/LayerNorm) in float64, '
        'attention_mask -> keyPaddingMask (1 = padding).',
        'bert_attention.safetensors', 'bert', p, {'embedDim': E, 'numHeads': H, 'bias': True},
        {'batchSize': B, 'seqLen': S, 'isCausal': False}, hidden, out)
    fields.insert(-2, ('keyPaddingMask', arr((attention_mask == 0).to(torch.uint8).numpy(), lambda v: str(int(v)))))
    sizes.append(write_json('bert_attention.json', fields))


def gpt2_case(sizes):
    E, H, B, S = 32, 2, 2, 7
    Dh = E // H
    torch.manual_seed(2003)
    # transformers' Conv1D(nf, nx): weight [nx, nf] = [in, out], y = x @ W + b.
    c_attn_w = uniform_(torch.empty(E, 3 * E), 1 / math.sqrt(E))
    c_attn_b = uniform_(torch.empty(3 * E), 1 / math.sqrt(E))
    c_proj_w = uniform_(torch.empty(E, E), 1 / math.sqrt(E))
    c_proj_b = uniform_(torch.empty(E), 1 / math.sqrt(E))
    hidden = torch.randn(B, S, E, dtype=torch.float32)
    p = 'h.0.'
    tensors = {
        f'{p}attn.c_attn.weight': c_attn_w, f'{p}attn.c_attn.bias': c_attn_b,
        f'{p}attn.c_proj.weight': c_proj_w, f'{p}attn.c_proj.bias': c_proj_b,
        # GPT-2's causal-mask buffer (old checkpoints carry it as attn.bias): not a weight.
        f'{p}attn.bias': torch.tril(torch.ones(8, 8, dtype=torch.uint8)).reshape(1, 1, 8, 8),
        f'{p}ln_1.weight': torch.ones(E), f'{p}ln_1.bias': torch.zeros(E),
    }
    sizes.append(save(os.path.join(OUT_DIR, 'gpt2_attention.safetensors'), tensors))

    x = hidden.double()
    qkv = x @ c_attn_w.double() + c_attn_b.double()
    q, k, v = qkv.split(E, dim=2)

    def heads(t):
        return t.view(B, S, H, Dh).permute(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    w = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
    w = torch.where(causal, w, torch.tensor(torch.finfo(torch.float64).min, dtype=torch.float64))
    a = torch.softmax(w, dim=-1) @ v
    a = a.permute(0, 2, 1, 3).reshape(B, S, E)
    out = a @ c_proj_w.double() + c_proj_b.double()
    sizes.append(write_json('gpt2_attention.json', common_fields(
        f'GPT-2 attention names under "{p}": Conv1D weights c_attn [{E}, {3 * E}] and c_proj [{E}, {E}] ([in, out], '
        'y = x @ W + b; seed 2003); reference: GPT2Attention math (causal) in float64 on the float32 weights.',
        'gpt2_attention.safetensors', 'gpt2', p, {'embedDim': E, 'numHeads': H, 'bias': True},
        {'batchSize': B, 'seqLen': S, 'isCausal': True}, hidden, out)))


SPECIAL = {
    torch.float16: [0.0, -0.0, 1.0, -1.5, 65504.0, -65504.0, 2.0 ** -24, 1023 * 2.0 ** -24, 2.0 ** -14,
                    0.1, 3.14159, math.inf, -math.inf, math.nan],
    torch.bfloat16: [0.0, -0.0, 1.0, -1.5, 3.3895313892515355e38, 2.0 ** -133, 2.0 ** -126, 1e-3,
                     0.1, 3.14159, math.inf, -math.inf, math.nan],
    torch.float64: [0.0, -0.0, 0.1, 1 / 3, -2.5e-40, 1e-50, 3.4e38, -1e30, math.pi],
}


def dtype_case(sizes, dtype, file, bias):
    E, H, B, S = 8, 2, 2, 4
    torch.manual_seed({torch.float16: 2004, torch.bfloat16: 2005, torch.float64: 2006}[dtype])
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True).eval()
    if bias:
        uniform_(mha.in_proj_bias, 1 / math.sqrt(E))
        uniform_(mha.out_proj.bias, 1 / math.sqrt(E))
    query = torch.randn(B, S, E, dtype=torch.float32)
    stored = {k: v.detach().double().to(dtype) for k, v in mha.state_dict().items()}
    if dtype == torch.float64:  # weights that are not float32 values: the reader must round them
        stored = {k: v + torch.rand(v.shape, dtype=torch.float64) * 1e-6 for k, v in stored.items()}
        assert all(not torch.equal(v.float().double(), v) for v in stored.values())
    stored['special'] = torch.tensor(SPECIAL[dtype], dtype=torch.float64).to(dtype)
    sizes.append(save(os.path.join(OUT_DIR, file), stored))
    decoded = {k: v.float() for k, v in stored.items()}  # what the engine must read: torch's conversion
    m64 = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True).double().eval()
    m64.load_state_dict({k: v.double() for k, v in decoded.items() if k != 'special'})
    q64 = query.double()
    # Distinct key/value objects keep 1.13 off its fast path, which fails for bias=False layers.
    out, _ = m64(q64, q64.clone(), q64.clone(), need_weights=False)
    name = DTYPE_OF[dtype]
    fields = common_fields(
        f'torch.nn.MultiheadAttention({E}, {H}, bias={bias}, batch_first=True) state dict stored as {name}, and a '
        f'"special" tensor of edge values; reference in float64 on the weights as .float() decodes them.',
        file, 'pytorch', '', {'embedDim': E, 'numHeads': H, 'bias': bias},
        {'batchSize': B, 'seqLen': S, 'isCausal': False}, query, out)
    fields.append(('decoded', '{\n' + ',\n'.join(f'    {json.dumps(k)}: {arr(v.numpy())}' for k, v in decoded.items()) + '\n  }'))
    sizes.append(write_json(file.replace('.safetensors', '.json'), fields))


def numpy_style_case(sizes):
    """Weights as a numpy tutorial writes them: [in, out], used as x @ W; the forward written per head."""
    E, H, B, S = 16, 4, 2, 5
    Dh = E // H
    torch.manual_seed(2007)
    w_qkv = uniform_(torch.empty(E, 3 * E), 1 / math.sqrt(E))
    w_o = uniform_(torch.empty(E, E), 1 / math.sqrt(E))
    b_qkv = uniform_(torch.empty(3 * E), 1 / math.sqrt(E))
    b_o = uniform_(torch.empty(E), 1 / math.sqrt(E))
    x32 = torch.randn(B, S, E, dtype=torch.float32)

    def forward(with_bias):
        x = x32.double()
        Wq, Wk, Wv = w_qkv.double().split(E, dim=1)
        bq, bk, bv = b_qkv.double().split(E) if with_bias else (0, 0, 0)
        outs = []
        for b in range(B):
            head_outputs = []
            for i in range(H):  # the tutorial's loop: W_Q_i = W_Q[:, i*Dh:(i+1)*Dh]
                cols = slice(i * Dh, (i + 1) * Dh)
                Qi = x[b] @ Wq[:, cols] + (bq[cols] if with_bias else 0)
                Ki = x[b] @ Wk[:, cols] + (bk[cols] if with_bias else 0)
                Vi = x[b] @ Wv[:, cols] + (bv[cols] if with_bias else 0)
                A = torch.softmax(Qi @ Ki.T / math.sqrt(Dh), dim=-1)
                head_outputs.append(A @ Vi)
            outs.append(torch.cat(head_outputs, dim=1) @ w_o.double() + (b_o.double() if with_bias else 0))
        return torch.stack(outs)

    out = forward(True)
    out_nobias = forward(False)
    # Check against nn.MultiheadAttention with the transposed weights (the reference's own sanity check).
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double().eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(w_qkv.double().T)
        mha.in_proj_bias.copy_(b_qkv.double())
        mha.out_proj.weight.copy_(w_o.double().T)
        mha.out_proj.bias.copy_(b_o.double())
    check, _ = mha(x32.double(), x32.double(), x32.double(), need_weights=False)
    assert torch.allclose(check, out, rtol=0, atol=1e-12)
    sizes.append(write_json('numpy_style.json', [
        ('description', json.dumps(
            f'numpy-tutorial weights: W_qkv [E, 3E] = [{E}, {3 * E}] used as x @ W_qkv (Q, K, V columns), per head '
            f'W_Q_i = W_Q[:, i*Dh:(i+1)*Dh]; W_O [E, E] on concat(heads); seed 2007; output of the per-head loop '
            'in float64 on the float32 values, with biases (output) and without (outputNoBias).')),
        ('torch_version', json.dumps(torch.__version__)),
        ('config', json.dumps({'embedDim': E, 'numHeads': H})),
        ('options', json.dumps({'batchSize': B, 'seqLen': S, 'isCausal': False})),
        ('wQkv', arr(w_qkv.numpy())),
        ('wO', arr(w_o.numpy())),
        ('bQkv', arr(b_qkv.numpy())),
        ('bO', arr(b_o.numpy())),
        ('query', arr(x32.numpy())),
        ('output', arr(out.numpy(), f64_text)),
        ('outputNoBias', arr(out_nobias.numpy(), f64_text)),
    ]))


def broken_files(sizes):
    d = os.path.join(OUT_DIR, 'broken')
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(2008)
    tensors = {'in_proj_weight': torch.randn(12, 4), 'out_proj.weight': torch.randn(4, 4)}
    good = encode_safetensors(tensors, {'format': 'pt'})
    (n,) = struct.unpack('<Q', good[:8])

    def damage(fn):
        return encode_safetensors(tensors, {'format': 'pt'}, header_override=fn)

    def set_field(name, key, value):
        def fn(h):
            h[name][key] = value
            return h
        return fn

    def drop_field(name, key):
        def fn(h):
            del h[name][key]
            return h
        return fn

    def bad_json(h):
        return json.dumps(h, separators=(',', ':'))[:-1] + ',}'  # a trailing comma: not JSON

    files = {
        'truncated.safetensors': good[:-10],                      # the last tensor's last 10 bytes are missing
        'truncated_header.safetensors': good[:8 + n // 2],        # cut inside the header
        'bad_header_json.safetensors': damage(bad_json),
        'header_not_object.safetensors': damage(lambda h: '[1,2,3]'),
        'missing_shape.safetensors': damage(drop_field('out_proj.weight', 'shape')),
        'wrong_dtype.safetensors': damage(set_field('out_proj.weight', 'dtype', 'float32')),
        'offsets_out_of_bounds.safetensors': damage(set_field('in_proj_weight', 'data_offsets', [1000, 1192])),
        'offsets_mismatch.safetensors': damage(set_field('in_proj_weight', 'shape', [12, 5])),
    }
    for name, data in files.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)
        sizes.append(len(data))


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.set_grad_enabled(False)
    sizes = []
    pytorch_mha_case(sizes)
    bert_case(sizes)
    gpt2_case(sizes)
    dtype_case(sizes, torch.float16, 'pytorch_mha_f16.safetensors', True)
    dtype_case(sizes, torch.bfloat16, 'pytorch_mha_bf16.safetensors', True)
    dtype_case(sizes, torch.float64, 'pytorch_mha_f64_nobias.safetensors', False)
    numpy_style_case(sizes)
    broken_files(sizes)
    for root, _, names in sorted(os.walk(OUT_DIR)):
        for name in sorted(names):
            path = os.path.join(root, name)
            print(f'{os.path.relpath(path)}  {os.path.getsize(path) / 1024:.1f} KiB')
    print(f'{len(sizes)} files, {sum(sizes) / 1024:.1f} KiB, torch {torch.__version__}', file=sys.stderr)


if __name__ == '__main__':
    main()
