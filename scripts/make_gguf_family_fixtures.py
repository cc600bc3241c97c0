"""GGUF fixtures of today's open model families, for test/gguf-families.test.ts.

For each family: a tiny random model built from transformers' own config class, its attention weights
written into a GGUF file the way llama.cpp's convert_hf_to_gguf.py writes them (gguf's GGUFWriter and
tensor names, LlamaModel.permute on Q/K rows for llama-style rope, Gemma 3's +1 on norm weights, the
metadata keys the converter sets), as F32 and as Q8_0 (gguf.quants), and what the family's own
transformers attention module computes in float64 for a causal prefill longer than the sliding window
(for Q8_0: the module given the dequantized weights).

    /work/venv/bin/python scripts/make_gguf_family_fixtures.py

Writes test/fixtures/gguf-families/{name}.f32.gguf, {name}.q8_0.gguf and {name}.json. The JSON holds,
per tested layer, the attention module's input x [S, E] and its outputs [S, E] (F32 and Q8_0 weights).
Variants named `-free` have a head size of their own (H·Dh ≠ E), as Qwen3-0.6B, Gemma and gpt-oss have.
"""

import json
import math
import os
import sys

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType, GGUFWriter, MODEL_ARCH, MODEL_TENSOR, TensorNameMap

import transformers

OUT = os.path.join(os.path.dirname(__file__), '..', 'test', 'fixtures', 'gguf-families')
S = 10  # prefill length: longer than every window below
WINDOW = 4
torch.set_default_dtype(torch.float64)


def llama_permute(w: np.ndarray, n_head: int, n_head_kv=None) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: per head, rows (half a, index j) → (j, a)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rp: dict, dim: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: rope_freqs.weight for rope_type llama3."""
    base = rp.get('rope_theta', 10000.0)
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rp.get('factor', 8.0)
    low_freq_factor = rp.get('low_freq_factor', 1.0)
    high_freq_factor = rp.get('high_freq_factor', 4.0)
    old_context_len = rp.get('original_max_position_embeddings', 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(1)
        elif wavelen > low_freq_wavelen:
            out.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


E, H, G = 32, 4, 2


def family(name, arch, model_cls, cfg, layers, *, dh=None, permute=False, norm_shift=0.0, meta=None):
    return dict(name=name, arch=arch, model_cls=model_cls, cfg=cfg, layers=layers, dh=dh or E // H, permute=permute, norm_shift=norm_shift, meta=meta or {})


def families():
    t = transformers
    common = dict(hidden_size=E, num_attention_heads=H, num_key_value_heads=G, intermediate_size=64, vocab_size=16, pad_token_id=0, bos_token_id=0, eos_token_id=0, max_position_embeddings=256, rms_norm_eps=1e-6)
    fams = []
    rp3 = dict(rope_type='llama3', rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
    fams.append(family('llama3', 'llama', t.LlamaModel, t.LlamaConfig(num_hidden_layers=2, rope_parameters=rp3, **common), [1], permute=True))
    fams.append(family('smollm3', 'smollm3', t.SmolLM3Model, t.SmolLM3Config(num_hidden_layers=4, rope_parameters=dict(rope_type='default', rope_theta=50000.0), **common), [2, 3], permute=True))
    for free in (False, True):
        dh = 16 if free else 8
        sfx = '-free' if free else ''
        fams.append(family('qwen3' + sfx, 'qwen3', t.Qwen3Model, t.Qwen3Config(num_hidden_layers=2, head_dim=dh, rope_parameters=dict(rope_type='default', rope_theta=1e6), **common), [1], dh=dh))
        fams.append(family('gemma' + sfx, 'gemma', t.GemmaModel, t.GemmaConfig(num_hidden_layers=2, head_dim=dh, **common), [1], dh=dh))
        fams.append(
            family(
                'gemma2' + sfx,
                'gemma2',
                t.Gemma2Model,
                t.Gemma2Config(num_hidden_layers=2, head_dim=dh, query_pre_attn_scalar=dh, sliding_window=WINDOW, attn_logit_softcapping=1.5, **common),
                [0, 1],
                dh=dh,
            )
        )
        g3rope = {'sliding_attention': dict(rope_type='default', rope_theta=10000.0), 'full_attention': dict(rope_type='linear', factor=8.0, rope_theta=1e6)}
        fams.append(
            family(
                'gemma3' + sfx,
                'gemma3',
                t.Gemma3TextModel,
                t.Gemma3TextConfig(num_hidden_layers=6, head_dim=dh, query_pre_attn_scalar=dh, sliding_window=WINDOW, rope_parameters=g3rope, **common),
                [0, 5],
                dh=dh,
                norm_shift=1.0,
            )
        )
        # truncate: True: ggml's YaRN floors/ceils its correction dims (ggml_rope_yarn_corr_dims); the real
        # gpt-oss config has truncate: False, where transformers does not (see the loader's comment).
        yarn = dict(rope_type='yarn', factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=True, original_max_position_embeddings=64, rope_theta=150000.0)
        fams.append(
            family(
                'gpt-oss' + sfx,
                'gpt-oss',
                t.GptOssModel,
                t.GptOssConfig(num_hidden_layers=2, head_dim=dh, sliding_window=WINDOW, rope_parameters=yarn, num_local_experts=2, num_experts_per_tok=1, **common),
                [0, 1],
                dh=dh,
            )
        )
    fams.append(family('olmo2', 'olmo2', t.Olmo2Model, t.Olmo2Config(num_hidden_layers=2, rope_parameters=dict(rope_type='default', rope_theta=500000.0), **common), [1]))
    fams.append(family('phi3', 'phi3', t.Phi3Model, t.Phi3Config(num_hidden_layers=2, partial_rotary_factor=0.5, rope_parameters=dict(rope_type='default', rope_theta=10000.0), **common), [1]))
    return fams


def randomize(attn, gen, f):
    """Weights large enough that rope, norms, windows and softcap change the output measurably."""
    with torch.no_grad():
        for pname, p in attn.named_parameters():
            if pname.endswith('norm.weight'):
                # Gemma's (1 + w) norms: w around 0; the others: w around 1.
                p.copy_((0.0 if f['norm_shift'] else 1.0) + 0.3 * torch.randn(p.shape, generator=gen))
            elif pname == 'sinks':
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def q8_0(w: np.ndarray):
    """Q8_0 bytes [N, K/32·34] of a row-major [N, K] weight and their dequantized values."""
    q = gguf.quants.quantize(w.astype(np.float32), GGMLQuantizationType.Q8_0)
    return q, gguf.quants.dequantize(q, GGMLQuantizationType.Q8_0).astype(np.float64)


def write_gguf(path, f, cfg, attns, quant):
    arch = f['arch']
    arch_enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = TensorNameMap(arch_enum, cfg.num_hidden_layers)
    w = GGUFWriter(path, arch)
    L = cfg.num_hidden_layers
    dh = f['dh']
    # What convert_hf_to_gguf.py's TextModel.set_gguf_parameters and the family's class write.
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if getattr(cfg, 'head_dim', None) is not None and arch not in ('llama', 'smollm3', 'olmo2', 'phi3'):
        w.add_key_length(dh)
        w.add_value_length(dh)
    rp = cfg.rope_parameters
    if arch == 'gemma3':
        rp = rp['full_attention']
    if arch not in ('gemma', 'gemma2'):  # Gemma2Model / GemmaModel write no rope.freq_base (llama.cpp: 10000)
        w.add_rope_freq_base(rp['rope_theta'])
    if arch in ('llama', 'smollm3'):
        w.add_rope_dimension_count(E // H)
    if arch == 'phi3':
        w.add_rope_dimension_count(int(cfg.partial_rotary_factor * E) // H)  # Phi3MiniModel
    if arch in ('gemma2', 'gemma3', 'gpt-oss'):
        w.add_sliding_window(cfg.sliding_window)
    if arch == 'gemma2':
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    if arch == 'gemma3' and rp.get('rope_type') == 'linear':
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp['factor'])
    if arch == 'gpt-oss':
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp['factor'])
        w.add_rope_scaling_orig_ctx_len(rp['original_max_position_embeddings'])
    if arch == 'llama':
        w.add_tensor('rope_freqs.weight', llama3_rope_factors(rp, E // H))
    for layer, attn in attns.items():
        for pname, p in attn.named_parameters():
            hf = f'model.layers.{layer}.self_attn.{pname}'
            name = names.get_name(hf, try_suffixes=('.weight', '.bias'))
            if name is None:
                raise SystemExit(f'no GGUF name for {hf}')
            if pname == 'sinks':
                name += '.weight'  # GptOssModel.modify_tensors
            data = p.detach().numpy().astype(np.float32)
            if pname.endswith('norm.weight'):
                data = data + np.float32(f['norm_shift'])  # Gemma3Model: norm weights + 1
            rows = None
            if f['permute'] and pname.startswith(('q_proj', 'k_proj')):
                rows = (H, H) if pname.startswith('q_proj') else (H, G)
            if quant and data.ndim == 2:
                q, _ = q8_0(data)
                if rows:
                    q = llama_permute(q, *rows)
                w.add_tensor(name, q, raw_dtype=GGMLQuantizationType.Q8_0)
            else:
                if rows:
                    data = llama_permute(data, *rows)
                w.add_tensor(name, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    for f in families():
        if only and f['name'] not in only:
            continue
        cfg = f['cfg']
        cfg._attn_implementation = 'eager'
        cfg._experts_implementation = 'eager'
        torch.manual_seed(0)
        model = f['model_cls'](cfg).double().eval()
        gen = torch.Generator().manual_seed(sum(map(ord, f['name'])))
        attns = {layer: model.layers[layer].self_attn for layer in f['layers']}
        for a in attns.values():
            randomize(a, gen, f)
        captured = {}

        def hook(layer):
            def fn(module, args, kwargs, output):
                captured[layer] = (dict(kwargs), output[0].detach().clone())

            return fn

        handles = [a.register_forward_hook(hook(layer), with_kwargs=True) for layer, a in attns.items()]
        embeds = torch.randn(1, S, E, generator=gen)
        with torch.no_grad():
            model(inputs_embeds=embeds, use_cache=False)
        for h in handles:
            h.remove()
        layers = []
        for layer, a in attns.items():
            kwargs, out = captured[layer]
            x = kwargs['hidden_states']
            # Q8_0: the same module given the dequantized projection weights.
            saved = {n: p.detach().clone() for n, p in a.named_parameters()}
            with torch.no_grad():
                for n, p in a.named_parameters():
                    if p.ndim == 2:
                        p.copy_(torch.from_numpy(q8_0(p.detach().numpy())[1]))
                out_q = a(**kwargs)[0]
                for n, p in a.named_parameters():
                    p.copy_(saved[n])
            layers.append(
                dict(
                    layer=layer,
                    x=[float(f'{v:.10g}') for v in x[0].flatten().tolist()],
                    out=[float(f'{v:.10g}') for v in out[0].flatten().tolist()],
                    outQ8_0=[float(f'{v:.10g}') for v in out_q[0].flatten().tolist()],
                )
            )
        base = os.path.join(OUT, f['name'])
        write_gguf(base + '.f32.gguf', f, cfg, attns, quant=False)
        write_gguf(base + '.q8_0.gguf', f, cfg, attns, quant=True)
        meta = dict(
            family=f['name'],
            architecture=f['arch'],
            transformers=transformers.__version__,
            embedDim=E,
            numHeads=H,
            numKvHeads=G,
            headDim=f['dh'],
            seqLen=S,
            blocks=cfg.num_hidden_layers,
            window=getattr(cfg, 'sliding_window', None),
            layerTypes=getattr(cfg, 'layer_types', None),
            layers=layers,
        )
        with open(base + '.json', 'w') as fh:
            json.dump(meta, fh, separators=(',', ':'))
        sizes = [os.path.getsize(base + s) for s in ('.f32.gguf', '.q8_0.gguf', '.json')]
        print(f['name'], sizes)


if __name__ == '__main__':
    main()
