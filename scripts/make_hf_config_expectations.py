"""What transformers itself makes of each config.json in test/fixtures/hf-configs/ (issue 39): per layer,
the attention module's head count, KV heads, head size, scaling, sliding window, softcap, sinks and
use of rope, and the rotary embedding's inv_freq (length, first, last) and attention_scaling, read from
the family's own classes (configuration_*.py, modeling_*.py; attention modules built on the meta
device, so no weights are made). Writes test/fixtures/hf-configs/expected.json and v5/<name>.json (each config as transformers 5's
save_pretrained writes it), which
test/hf-configs.test.ts compares hfModelLayers and attentionLayerFromHf with.

Run: /work/venv/bin/python scripts/make_hf_config_expectations.py
"""

import importlib
import inspect
import json
import pathlib

import numpy
import torch
import transformers
from transformers import CONFIG_MAPPING

DIR = pathlib.Path(__file__).resolve().parent.parent / "test" / "fixtures" / "hf-configs"


def module_of(model_type):
    name = {"qwen3_5_text": "qwen3_5", "gemma3_text": "gemma3", "gemma4_text": "gemma4"}.get(model_type, model_type)
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def pick(mod, suffix, avoid=("Vision", "Audio")):
    out = [c for n, c in inspect.getmembers(mod, inspect.isclass) if n.endswith(suffix) and c.__module__ == mod.__name__ and not any(a in n for a in avoid)]
    return out


def f32(x):
    """The shortest decimal that reads back as the same float32 (Math.fround of it in the test)."""
    return float(str(numpy.float32(x)))


def kv_heads(a, text):
    if hasattr(a, "k_proj"):
        return a.k_proj.out_features // a.head_dim
    if hasattr(a, "qkv_proj"):
        return (a.qkv_proj.out_features // a.head_dim - text.num_attention_heads) // 2
    return None  # a KV-shared layer (Gemma 4): no k/v projections of its own


def main():
    result = {"transformers": transformers.__version__, "models": {}}
    for path in sorted(DIR.glob("*.json")):  # not v5/
        if path.name == "expected.json":
            continue
        raw = json.loads(path.read_text())
        raw = {k: v for k, v in raw.items() if not k.startswith("_fixture")}
        cfg = CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
        # The same model as transformers 5's save_pretrained writes it (to_json_string(use_diff=True):
        # rope_parameters, and only what differs from the config class's defaults).
        (DIR / "v5").mkdir(exist_ok=True)
        (DIR / "v5" / path.name).write_text(cfg.to_json_string(use_diff=True))
        text = cfg.get_text_config()
        text._attn_implementation = "eager"
        mod = module_of(text.model_type)
        attn_classes = [c for c in pick(mod, "Attention") if "Linear" not in c.__name__ and "GatedDelta" not in c.__name__]
        # the decoder's self-attention class: the one the decoder layer builds
        layer_cls = [c for c in pick(mod, "DecoderLayer")][0]
        src = inspect.getsource(layer_cls.__init__)
        attn_cls = next(c for c in attn_classes if c.__name__ + "(" in src)
        layer_types = list(getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers)
        layers = []
        for i in range(text.num_hidden_layers):
            t = layer_types[i]
            if t == "linear_attention":
                layers.append({"type": t})
                continue
            with torch.device("meta"):
                a = attn_cls(text, i)
            q_out = a.q_proj.out_features if hasattr(a, "q_proj") else None
            e = {
                "type": t,
                "headDim": a.head_dim,
                "numHeads": text.num_attention_heads,
                "numKvHeads": kv_heads(a, text),
                "qRows": q_out,
                "scaling": a.scaling,
                # Mistral and Phi-3 keep no window on the module: their model's mask is the sliding one for
                # every layer when config.sliding_window is set (modeling_mistral.py, modeling_phi3.py:
                # `create_causal_mask if self.config.sliding_window is None else create_sliding_window_causal_mask`).
                "slidingWindow": getattr(a, "sliding_window", None) if text.model_type not in ("mistral", "phi3") else text.sliding_window,
                "softcap": getattr(a, "attn_logit_softcapping", None),
                "sinks": hasattr(a, "sinks"),
                "useRope": bool(getattr(a, "use_rope", True)),
                "kvShared": bool(getattr(a, "is_kv_shared_layer", False)),
            }
            layers.append(e)
        kinds = []
        for e in layers:
            if e not in kinds:
                kinds.append(e)
        rot_cls = [c for c in pick(mod, "RotaryEmbedding") if "Vision" not in c.__name__]
        rot = rot_cls[0](text)
        ropes = {}
        for n, b in rot.named_buffers():
            if n.endswith("inv_freq") and "original" not in n:
                key = n[: -len("inv_freq")].rstrip("_") or "all"
                scaling = getattr(rot, f"{key}_attention_scaling" if key != "all" else "attention_scaling")
                v = b.float()
                ropes[key] = {"n": v.numel(), "first": v[0].item(), "last": v[-1].item(), "invFreq": [f32(x.item()) for x in v], "attentionScaling": float(scaling)}
        result["models"][path.stem] = {
            "modelType": text.model_type,
            "attentionClass": attn_cls.__name__,
            "rotaryClass": rot_cls[0].__name__,
            "hiddenSize": text.hidden_size,
            "numLayers": text.num_hidden_layers,
            # each distinct layer once (kinds), and per layer the index of its kind
            "kinds": kinds,
            "layerKind": [kinds.index(e) for e in layers],
            "rope": ropes,
        }
        print(path.stem, attn_cls.__name__, rot_cls[0].__name__, {k: (r["n"], r["first"], r["last"], r["attentionScaling"]) for k, r in ropes.items()})
    (DIR / "expected.json").write_text(json.dumps(result, separators=(",", ":")) + "\n")


main()
