"""Fixtures for test/head-ops.test.ts: transformers' own attention modules in float64 with tiny random
weights, their inputs and outputs, written as JSON under test/fixtures/head-ops/.

  olmo2.json  Olmo2Attention (QK-norm over the whole projection: q_norm RMSNorm(H·Dh), k_norm
              RMSNorm(G·Dh), then rotary), H = 4, G = 2, Dh = 4, E = 16, causal, batch 1, S = 5.

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


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "olmo2.json"), "w") as f:
        json.dump(olmo2(), f)
        f.write("\n")
    print("wrote", os.path.join(OUT, "olmo2.json"))
