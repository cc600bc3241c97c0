"""Inverse frequencies and attention factors of every rope type, from transformers' own rotary classes.

For each case: a config.json dict (transformers 4 or 5 spelling), the family's config class built from it
the way from_pretrained does (Config.from_dict), the family's own RotaryEmbedding class (per layer type
where the family has them), and what it holds: inv_freq and attention_scaling. Written to
test/fixtures/hf-rope/cases.json for test/hf-loader.test.ts (attentionLayerFromHf's rotary against these).

Run: /work/venv/bin/python scripts/make_hf_rope_fixtures.py
"""

import importlib
import json
import os

import transformers
from transformers import CONFIG_MAPPING

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "hf-rope", "cases.json")

ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding"),
    "mistral": ("mistral", "MistralRotaryEmbedding"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding"),
    "qwen3_next": ("qwen3_next", "Qwen3NextRotaryEmbedding"),
    "qwen3_5_text": ("qwen3_5", "Qwen3_5TextRotaryEmbedding"),
    "gemma": ("gemma", "GemmaRotaryEmbedding"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"),
    "gemma4_text": ("gemma4", "Gemma4TextRotaryEmbedding"),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding"),
    "smollm3": ("smollm3", "SmolLM3RotaryEmbedding"),
    "phi3": ("phi3", "Phi3RotaryEmbedding"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding"),
    "olmo3": ("olmo3", "Olmo3RotaryEmbedding"),
}

BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=6, vocab_size=32, intermediate_size=32)


def case(name, model_type, **cfg):
    return {"name": name, "config": {"model_type": model_type, **BASE, **cfg}}


CASES = [
    case("llama default (t4: rope_theta)", "llama", rope_theta=500000.0, max_position_embeddings=2048),
    case("llama default (t5: rope_parameters)", "llama", rope_parameters={"rope_type": "default", "rope_theta": 12345.0}),
    case("llama linear (t4)", "llama", rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 4.0}),
    case(
        "llama llama3 (t4, Llama 3.2)",
        "llama",
        rope_theta=500000.0,
        max_position_embeddings=131072,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    ),
    case(
        "llama yarn (t5)",
        "llama",
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 8192},
    ),
    case(
        "llama yarn mscale (t4)",
        "llama",
        max_position_embeddings=16384,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "yarn", "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 0.5, "original_max_position_embeddings": 2048, "beta_fast": 16, "beta_slow": 2},
    ),
    case("llama dynamic (t4)", "llama", max_position_embeddings=4096, rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 2.0}),
    case("mistral (t4)", "mistral", rope_theta=1000000.0, sliding_window=4),
    case("qwen2 (t4)", "qwen2", rope_theta=1000000.0),
    case("qwen3 (t5)", "qwen3", head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    case("qwen3 yarn (t4)", "qwen3", head_dim=32, max_position_embeddings=131072, rope_theta=1000000.0, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    case("qwen3_next (t4: partial_rotary_factor)", "qwen3_next", head_dim=32, rope_theta=10000000.0, partial_rotary_factor=0.25),
    case("qwen3_next (t5)", "qwen3_next", head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.5}),
    case(
        "qwen3_5_text (t5, mrope)",
        "qwen3_5_text",
        head_dim=32,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    ),
    case("gemma (t4)", "gemma", head_dim=16, rope_theta=10000.0),
    case("gemma2 (t4)", "gemma2", head_dim=16, rope_theta=10000.0),
    case("gemma3_text (t4)", "gemma3_text", head_dim=16, rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0}),
    case(
        "gemma3_text (t5)",
        "gemma3_text",
        head_dim=16,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    case("gemma4_text (defaults)", "gemma4_text", head_dim=16, global_head_dim=32),
    case(
        "gemma4_text (t5)",
        "gemma4_text",
        head_dim=16,
        global_head_dim=64,
        rope_parameters={
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    case("gpt_oss (defaults: yarn)", "gpt_oss", head_dim=16),
    case(
        "gpt_oss (t4)",
        "gpt_oss",
        head_dim=16,
        rope_theta=150000.0,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
    ),
    case("smollm3 (t4)", "smollm3", rope_theta=5000000.0),
    case("phi3 (t4, partial)", "phi3", rope_theta=10000.0, partial_rotary_factor=0.75),
    case(
        "phi3 longrope (t4)",
        "phi3",
        rope_theta=10000.0,
        partial_rotary_factor=0.75,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]},
    ),
    case("olmo2 (t4)", "olmo2", rope_theta=500000.0),
    case("olmo3 (t4)", "olmo3", rope_theta=50000.0, sliding_window=4),
    case(
        "olmo3 yarn (t5)",
        "olmo3",
        max_position_embeddings=65536,
        rope_parameters={
            "full_attention": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 500000.0, "original_max_position_embeddings": 8192, "attention_factor": 1.2},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
        },
    ),
]


def main():
    out = []
    for c in CASES:
        cfg = c["config"]
        mt = cfg["model_type"]
        config = CONFIG_MAPPING[mt].from_dict({k: v for k, v in json.loads(json.dumps(cfg)).items() if k != "model_type"})
        module, cls = ROTARY[mt]
        Rotary = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls)
        rope = Rotary(config)
        types = sorted(set(config.layer_types)) if getattr(rope, "layer_types", None) else [None]
        per_type = {}
        for t in types:
            if t is None:
                inv, scale = rope.inv_freq, rope.attention_scaling
            else:
                inv, scale = getattr(rope, f"{t}_inv_freq"), getattr(rope, f"{t}_attention_scaling")
            per_type[t or "all"] = {"inv_freq": [float(x) for x in inv.double().tolist()], "attention_scaling": float(scale)}
        layer_types = list(getattr(config, "layer_types", None) or [])
        out.append({**c, "layer_types": layer_types, "rope": per_type})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": out}, f, indent=1)
    print(f"wrote {len(out)} cases to {OUT}")


if __name__ == "__main__":
    main()
