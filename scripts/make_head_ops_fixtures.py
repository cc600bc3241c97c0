"""Fixtures for test/head-ops.test.ts: transformers' own attention modules in float64 with tiny random
weights, their inputs and outputs, written as JSON under test/fixtures/head-ops/.

  olmo2.json  Olmo2Attention (QK-norm over the whole projection: q_norm RMSNorm(H·Dh), k_norm
              RMSNorm(G·Dh), then rotary), H = 4, G = 2, Dh = 4, E = 16, causal, batch 1, S = 5.

  gemma4.json Gemma4TextAttention, a full-attention layer with attention_k_eq_v (no v_proj: V is the
              k projection before k_norm and rotary), per-head q_norm / k_norm, the weightless v_norm,
              scaling 1; H = 4, G = 2, Dh = 4, E = 16, causal, S = 5. Its rope (proportional,
              partial) is replaced by plain cos/sin tables given to both sides.
  qwen3_next.json  Qwen3NextAttention: the output gate (q_proj [H·2·Dh, E], per head the query rows
              then the gate rows; out = o_proj(attn ⊙ sigmoid(gate))), per-head q/k norms of weight
              1 + w, bias; H = 4, G = 2, Dh = 4, E = 16, causal, S = 5, full-width cos/sin tables.

Run: /work/venv/bin/python scripts/make_head_ops_fixtures.py
"""

import json
import os

import torch
from transformers.models.olmo2.configuration_olmo2 import Olmo2Config
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "head-ops")


def flat(t):
    return [round(float(v), 17) for v in t.detach().reshape(-1).tolist()]


def olmo2():
    torch.manual_seed(39)
    E, H, G, Dh, S = 16, 4, 2, 4, 5
    config = Olmo2Config(
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=G,
        head_dim=Dh,
        rms_norm_eps=1e-6,
        attention_bias=False,
        max_position_embeddings=16,
    )
    config._attn_implementation = "eager"
    attn = Olmo2Attention(config, layer_idx=0).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.rand_like(p) * 0.8 - 0.4)
        attn.q_norm.weight.copy_(1 + 0.5 * (torch.rand(H * Dh, dtype=torch.float64) - 0.5))
        attn.k_norm.weight.copy_(1 + 0.5 * (torch.rand(G * Dh, dtype=torch.float64) - 0.5))
    rope = Olmo2RotaryEmbedding(config).double()
    x = torch.rand(1, S, E, dtype=torch.float64) * 2 - 1
    positions = torch.arange(S).unsqueeze(0)
    cos, sin = rope(x, positions)
    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        y, _ = attn(x, (cos, sin), mask)
    half = Dh // 2
    return {
        "module": "transformers Olmo2Attention (float64, eager)",
        "embedDim": E,
        "numHeads": H,
        "numKvHeads": G,
        "headDim": Dh,
        "seqLen": S,
        "eps": 1e-6,
        "q_proj_weight": flat(attn.q_proj.weight),
        "k_proj_weight": flat(attn.k_proj.weight),
        "v_proj_weight": flat(attn.v_proj.weight),
        "out_proj_weight": flat(attn.o_proj.weight),
        "q_norm": flat(attn.q_norm.weight),
        "k_norm": flat(attn.k_norm.weight),
        # HF's cos/sin are [S, Dh] with the halves duplicated: the engine takes the first Dh / 2 columns.
        "cos": flat(cos[0, :, :half]),
        "sin": flat(sin[0, :, :half]),
        "x": flat(x),
        "output": flat(y),
    }


def gemma4():
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    torch.manual_seed(4)
    E, H, G, Dh, S = 16, 4, 2, 4, 5
    config = Gemma4TextConfig(
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=G,
        head_dim=Dh,
        global_head_dim=Dh,
        num_global_key_value_heads=G,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        attention_k_eq_v=True,
        rms_norm_eps=1e-6,
        vocab_size=32,
        intermediate_size=8,
    )
    config._attn_implementation = "eager"
    attn = Gemma4TextAttention(config, layer_idx=0).double()
    assert attn.use_alternative_attention and attn.v_proj is None
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.rand_like(p) * 0.8 - 0.4)
        attn.q_norm.weight.copy_(1 + 0.5 * (torch.rand(Dh, dtype=torch.float64) - 0.5))
        attn.k_norm.weight.copy_(1 + 0.5 * (torch.rand(Dh, dtype=torch.float64) - 0.5))
    x = torch.rand(1, S, E, dtype=torch.float64) * 2 - 1
    half = Dh // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / Dh)
    freqs = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[None]
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        y, _ = attn(x, (cos, sin), mask, shared_kv_states={})
    return {
        "module": "transformers Gemma4TextAttention (float64, eager, attention_k_eq_v)",
        "embedDim": E,
        "numHeads": H,
        "numKvHeads": G,
        "headDim": Dh,
        "seqLen": S,
        "eps": 1e-6,
        "q_proj_weight": flat(attn.q_proj.weight),
        "k_proj_weight": flat(attn.k_proj.weight),
        "out_proj_weight": flat(attn.o_proj.weight),
        "q_norm": flat(attn.q_norm.weight),
        "k_norm": flat(attn.k_norm.weight),
        "cos": flat(cos[0, :, :half]),
        "sin": flat(sin[0, :, :half]),
        "x": flat(x),
        "output": flat(y),
    }


def qwen3_next():
    from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    torch.manual_seed(35)
    E, H, G, Dh, S = 16, 4, 2, 4, 5
    config = Qwen3NextConfig(
        hidden_size=E,
        num_attention_heads=H,
        num_key_value_heads=G,
        head_dim=Dh,
        attention_bias=True,
        rms_norm_eps=1e-6,
        num_hidden_layers=1,
        vocab_size=32,
        intermediate_size=8,
    )
    config._attn_implementation = "eager"
    attn = Qwen3NextAttention(config, layer_idx=0).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.rand_like(p) * 0.8 - 0.4)
    x = torch.rand(1, S, E, dtype=torch.float64) * 2 - 1
    half = Dh // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / Dh)
    freqs = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[None]
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        y, _ = attn(x, (cos, sin), mask)
    # q_proj's rows per head: Dh query rows, then Dh gate rows.
    wq = attn.q_proj.weight.view(H, 2, Dh, E)
    bq = attn.q_proj.bias.view(H, 2, Dh)
    return {
        "module": "transformers Qwen3NextAttention (float64, eager)",
        "embedDim": E,
        "numHeads": H,
        "numKvHeads": G,
        "headDim": Dh,
        "seqLen": S,
        "eps": 1e-6,
        "q_proj_weight": flat(wq[:, 0]),
        "gate_proj_weight": flat(wq[:, 1]),
        "k_proj_weight": flat(attn.k_proj.weight),
        "v_proj_weight": flat(attn.v_proj.weight),
        "in_proj_bias": flat(torch.cat([bq[:, 0].reshape(-1), attn.k_proj.bias, attn.v_proj.bias])),
        "gate_proj_bias": flat(bq[:, 1]),
        "out_proj_weight": flat(attn.o_proj.weight),
        "out_proj_bias": flat(attn.o_proj.bias),
        "q_norm": flat(1 + attn.q_norm.weight),
        "k_norm": flat(1 + attn.k_norm.weight),
        "cos": flat(cos[0, :, :half]),
        "sin": flat(sin[0, :, :half]),
        "x": flat(x),
        "output": flat(y),
    }


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "olmo2.json"), "w") as f:
        json.dump(olmo2(), f)
        f.write("\n")
    with open(os.path.join(OUT, "gemma4.json"), "w") as f:
        json.dump(gemma4(), f)
        f.write("\n")
    with open(os.path.join(OUT, "qwen3_next.json"), "w") as f:
        json.dump(qwen3_next(), f)
        f.write("\n")
    print("wrote olmo2.json, gemma4.json, qwen3_next.json in", OUT)
