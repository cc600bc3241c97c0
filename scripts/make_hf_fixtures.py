"""Hugging Face checkpoint fixtures for test/hf-models.test.ts (issue 39).

For each family a tiny random-weight model is built from the family's own transformers config class,
written with `save_pretrained` (config.json + safetensors exactly as transformers writes them), and then
cut down to the attention tensors of the layers under test (so the fixtures stay small). The expected
output of each tested layer comes from the family's own attention module, run inside the model's own
forward pass in float64 with eager attention: the model builds the causal / sliding-window mask and the
rotary position embeddings (per layer type where the family has them) exactly as it does for real, and a
forward pre-hook swaps the tested layer's input for the fixture's random x. Weights are rounded to their
stored dtype before the float64 run.

Run: /work/venv/bin/python scripts/make_hf_fixtures.py  (torch CPU, transformers 5.x, safetensors)
Writes test/fixtures/hf-models/<family>/:
  config.json, model.safetensors (or two shards + model.safetensors.index.json),
  config.v4.json (families that predate transformers 5: the same model in transformers 4's spelling, checked
  to read back to the same rope and layer types), gemma4/config.global-keys.json (Gemma 4's published keys),
  x.f32.bin  [S, E] float32 little-endian (the layer input, batch 1),
  out-L<i>.f64.bin  [S, E] float64 little-endian (the layer's output),
  manifest.json  (what each tested layer is).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test" / "fixtures" / "hf-models"
S = 16  # sequence length; every window below is 8 (shorter than S)
WINDOW = 8
SEED = 39

# Common small sizes: the models are built whole (tiny vocab, tiny MLPs), then cut down to attention.
COMMON = dict(vocab_size=64, intermediate_size=32, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)

FAMILIES: dict[str, dict] = {
    "llama": dict(
        config=dict(model_type="llama", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2,
                    rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=64)),
        layers=[1],
        about="Llama 3: GQA, llama3 rope frequency factors (factor 8, original 64: low, smoothed and scaled bands)",
    ),
    "mistral": dict(
        config=dict(model_type="mistral", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, sliding_window=WINDOW,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        layers=[1],
        dtype=torch.float16,
        about="Mistral: GQA, sliding window 8 on every layer; stored in F16",
    ),
    "qwen2": dict(
        config=dict(model_type="qwen2", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        layers=[1],
        about="Qwen2: GQA, biases on q/k/v (none on o)",
    ),
    "qwen3": dict(
        config=dict(model_type="qwen3", hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=2, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        layers=[1],
        dtype=torch.bfloat16,
        about="Qwen3: head_dim 16 with H*Dh 64 != E 48, per-head q_norm/k_norm; stored in BF16",
    ),
    "qwen3_next": dict(
        config=dict(model_type="qwen3_next", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                    linear_conv_kernel_dim=2, linear_key_head_dim=8, linear_value_head_dim=8,
                    linear_num_key_heads=2, linear_num_value_heads=2, moe_intermediate_size=16,
                    shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25)),
        layers=[1],
        about="Qwen3-Next full-attention layer: output gate interleaved per head in q_proj, (1 + w) q/k norms, "
              "partial rotary 0.25; layer 0 is linear attention (refused)",
    ),
    "qwen3_5": dict(
        config=dict(model_type="qwen3_5_text", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                    linear_conv_kernel_dim=2, linear_key_head_dim=8, linear_value_head_dim=8,
                    linear_num_key_heads=2, linear_num_value_heads=2,
                    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25)),
        layers=[1],
        about="Qwen3.5 (text) full-attention layer: output gate in q_proj, (1 + w) q/k norms, partial rotary 0.25; "
              "layer 0 is linear attention (refused)",
    ),
    "gemma": dict(
        config=dict(model_type="gemma", hidden_size=48, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                    num_hidden_layers=2),
        layers=[1],
        about="Gemma: head_dim 16 with H*Dh 64 != E 48, one KV head (MQA)",
    ),
    "gemma2": dict(
        config=dict(model_type="gemma2", hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=2, sliding_window=WINDOW, query_pre_attn_scalar=24,
                    attn_logit_softcapping=5.0, final_logit_softcapping=None),
        layers=[0, 1],
        about="Gemma 2: sliding (even) / full (odd) layers, scale query_pre_attn_scalar**-0.5 (24), "
              "softcap 5, head_dim 16 != E/H",
    ),
    "gemma3": dict(
        config=dict(model_type="gemma3_text", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, num_hidden_layers=6, sliding_window=WINDOW, query_pre_attn_scalar=24,
                    rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                     "full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1000000.0)}),
        layers=[0, 5],
        shard=True,
        about="Gemma 3 (text): 5 sliding layers (base 10000) then a full one (base 1e6, linear x8), (1 + w) q/k "
              "norms, scale query_pre_attn_scalar**-0.5; sharded in two files",
    ),
    "gemma4": dict(
        config=dict(model_type="gemma4_text", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
                    num_hidden_layers=6, sliding_window=WINDOW, hidden_size_per_layer_input=8,
                    vocab_size_per_layer_input=64, num_kv_shared_layers=0),
        layers=[0, 5],
        about="Gemma 4 (text): E 32, sliding layers (Dh 16, 2 KV heads, base 1e4) and a full layer (Dh 32, 1 KV head, "
              "K = V, proportional rope 0.25 base 1e6), q/k norms (plain w), weightless v_norm, scale 1",
    ),
    "gpt_oss": dict(
        config=dict(model_type="gpt_oss", hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=2, sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2,
                    max_position_embeddings=64 * 32,
                    rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                         beta_slow=1.0, original_max_position_embeddings=64, truncate=False)),
        layers=[0, 1],
        about="gpt-oss: sliding (even) / full (odd) layers, learned sinks, biases, YaRN (factor 32, original 64)",
    ),
    "smollm3": dict(
        config=dict(model_type="smollm3", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=4, rope_parameters=dict(rope_type="default", rope_theta=2000000.0)),
        layers=[2, 3],
        about="SmolLM3: every 4th layer NoPE (no_rope_layers[3] = 0): layer 2 rotary, layer 3 NoPE",
    ),
    "phi3": dict(
        config=dict(model_type="phi3", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, sliding_window=WINDOW,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.75)),
        layers=[1],
        about="Phi-3/Phi-4-mini: fused qkv_proj, partial rotary 0.75 (6 of 8), sliding window 8",
    ),
    "olmo2": dict(
        config=dict(model_type="olmo2", hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, rope_parameters=dict(rope_type="default", rope_theta=500000.0)),
        layers=[1],
        about="OLMo 2: one q_norm over all H*Dh and one k_norm over all G*Dh",
    ),
}


class _Stop(Exception):
    pass


def build_config(spec: dict):
    kwargs = dict(COMMON)
    kwargs.update(spec["config"])
    model_type = kwargs.pop("model_type")
    cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
    cfg.initializer_range = cfg.hidden_size ** -0.5
    cfg._attn_implementation = "eager"
    if hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = "eager"  # MoE blocks (not under test) in float64 too
    return cfg


def is_one_plus_w(norm: torch.nn.Module) -> bool:
    src = inspect.getsource(type(norm).forward)
    return "1.0 + self.weight" in src or "1 + self.weight" in src


def randomize_attention(attn: torch.nn.Module, gen: torch.Generator) -> None:
    """Random weights with O(1) outputs: projections ~ N(0, 1/fan_in), norm weights around their identity,
    biases and sinks random too (transformers' init leaves them at their identity, which would hide bugs)."""
    with torch.no_grad():
        for name, mod in attn.named_modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * mod.in_features ** -0.5)
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.3)
            elif name and getattr(mod, "weight", None) is not None and mod.weight.dim() == 1:
                noise = torch.randn(mod.weight.shape, generator=gen) * 0.3
                mod.weight.copy_(noise if is_one_plus_w(mod) else 1.0 + noise)
        if getattr(attn, "sinks", None) is not None:
            attn.sinks.copy_(torch.randn(attn.sinks.shape, generator=gen))


def layer_prefix(model, idx: int) -> str:
    for name, mod in model.named_modules():
        if name.endswith(f"layers.{idx}.self_attn"):
            return name + "."
    raise RuntimeError(f"no layers.{idx}.self_attn in {type(model).__name__}")


def attention_module(model, idx: int):
    return model.get_submodule(layer_prefix(model, idx)[:-1])


def expected_outputs(model, layers: list[int], x: torch.Tensor) -> dict[int, torch.Tensor]:
    """Runs the model's own forward in float64; each tested layer's self_attn gets x as its input."""
    outs: dict[int, torch.Tensor] = {}
    handles = []
    for idx in layers:
        attn = attention_module(model, idx)

        def pre(mod, args, kwargs, _idx=idx):
            if "hidden_states" in kwargs:
                kwargs["hidden_states"] = x.clone()
            else:
                args = (x.clone(), *args[1:])
            return args, kwargs

        def post(mod, args, kwargs, output, _idx=idx):
            outs[_idx] = (output[0] if isinstance(output, tuple) else output).detach().clone()
            if len(outs) == len(layers):
                raise _Stop()

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(attn.register_forward_hook(post, with_kwargs=True))
    ids = torch.arange(S).remainder(60).add(3).unsqueeze(0)
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    return outs


def cross_check(model, cfg, idx: int, x: torch.Tensor, out: torch.Tensor) -> None:
    """The same layer called directly: the additive mask built here (0 where key j is visible from query i:
    j <= i and, on windowed layers, i - j < window; dtype min elsewhere, as masking_utils' eager mask) and
    position embeddings from the model's own rotary module. Must agree with the in-model run."""
    attn = attention_module(model, idx)
    window = describe_layer(cfg, model, idx)["window"]
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    visible = j <= i
    if window:
        visible &= (i - j) < window
    mask = torch.zeros((S, S), dtype=torch.float64).masked_fill(~visible, torch.finfo(torch.float64).min)[None, None]
    pos = torch.arange(S)[None]
    rotary = model.model.rotary_emb
    kind = cfg.layer_types[idx] if getattr(cfg, "layer_types", None) else "full_attention"
    params = inspect.signature(rotary.forward).parameters
    if cfg.model_type.startswith("qwen3_5"):
        pos = pos[None].expand(3, 1, S)  # multimodal rope sections: text positions are equal in all three
    pe = rotary(x, pos, kind) if "layer_type" in params else rotary(x, pos)
    kwargs = dict(hidden_states=x.clone(), position_embeddings=pe, attention_mask=mask)
    if "shared_kv_states" in inspect.signature(attn.forward).parameters:
        kwargs["shared_kv_states"] = {}
    with torch.no_grad():
        direct = attn(**kwargs)[0]
    err = float((direct - out).abs().max())
    if err > 1e-10:
        raise RuntimeError(f"layer {idx}: direct call differs from the in-model run by {err}")


def write_checkpoint(model, cfg_dir: Path, keep: list[str], shard: bool, dtype: torch.dtype) -> list[str]:
    """save_pretrained, then keep only the tested attention tensors (same names, dtype, metadata)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy.deepcopy(model).to(dtype).save_pretrained(tmp, safe_serialization=True)
        tmp = Path(tmp)
        index = tmp / "model.safetensors.index.json"
        files = [tmp / "model.safetensors"] if not index.exists() else sorted(tmp.glob("model-*.safetensors"))
        tensors = {}
        metadata = None
        for f in files:
            with safe_open(f, "pt") as fh:
                metadata = fh.metadata()
                for k in fh.keys():
                    if k in keep:
                        tensors[k] = fh.get_tensor(k)
        missing = [k for k in keep if k not in tensors]
        if missing:
            raise RuntimeError(f"save_pretrained did not write {missing}")
        shutil.copy(tmp / "config.json", cfg_dir / "config.json")
    names = sorted(tensors)
    if not shard:
        save_file({k: tensors[k].contiguous() for k in names}, cfg_dir / "model.safetensors", metadata=metadata)
        return ["model.safetensors"]
    # Two shards as save_pretrained names them; alternate tensors go to alternate files, so every tested
    # layer needs both files.
    parts = [names[0::2], names[1::2]]
    fnames = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
    weight_map = {}
    for part, fname in zip(parts, fnames):
        save_file({k: tensors[k].contiguous() for k in part}, cfg_dir / fname, metadata=metadata)
        weight_map.update({k: fname for k in part})
    total_size = sum(t.numel() * t.element_size() for t in tensors.values())
    total_params = sum(t.numel() for t in tensors.values())
    with open(cfg_dir / "model.safetensors.index.json", "w") as fh:
        json.dump({"metadata": {"total_parameters": total_params, "total_size": total_size},
                   "weight_map": dict(sorted(weight_map.items()))}, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return fnames


# Families whose checkpoints predate transformers 5 also get config.v4.json: the same model spelled as
# transformers 4 wrote it (rope_theta / rope_scaling / top-level partial_rotary_factor, torch_dtype;
# Gemma 3's rope_local_base_freq and sliding_window_pattern, Gemma 2 and 3 without layer_types).
V4_FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "qwen3_next", "gemma", "gemma2", "gemma3", "gpt_oss", "smollm3",
               "phi3", "olmo2"]


def v4_spelling(v5: dict) -> dict:
    d = {k: v for k, v in v5.items()}
    d["transformers_version"] = "4.57.1"
    d["torch_dtype"] = d.pop("dtype")
    rp = d.pop("rope_parameters")
    if "full_attention" in rp:  # Gemma 3: one dict per layer type
        full, local = rp["full_attention"], rp["sliding_attention"]
        d["rope_theta"] = full["rope_theta"]
        d["rope_local_base_freq"] = local["rope_theta"]
        assert local.get("rope_type", "default") == "default"
        rest = {k: v for k, v in full.items() if k != "rope_theta"}
        d["rope_scaling"] = rest if rest.get("rope_type", "default") != "default" else None
    else:
        d["rope_theta"] = rp["rope_theta"]
        if "partial_rotary_factor" in rp:
            d["partial_rotary_factor"] = rp["partial_rotary_factor"]
        rest = {k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")}
        d["rope_scaling"] = rest if rest.get("rope_type", "default") != "default" else None
    if d["model_type"] == "gemma3_text":
        d.pop("_sliding_window_pattern", None)
        d["sliding_window_pattern"] = 6
        del d["layer_types"]
    if d["model_type"] == "gemma2":
        del d["layer_types"]
    return dict(sorted(d.items()))


def check_v4(v4: dict, cfg, layers: list[int]) -> None:
    """transformers 5 reads the v4 spelling back to the same layer types and the same rotary frequencies."""
    kwargs = {k: v for k, v in copy.deepcopy(v4).items() if k not in ("model_type", "architectures", "transformers_version")}
    old = transformers.AutoConfig.for_model(v4["model_type"], **kwargs)
    assert getattr(old, "layer_types", None) == getattr(cfg, "layer_types", None), old
    assert getattr(old, "no_rope_layers", None) == getattr(cfg, "no_rope_layers", None), old
    assert getattr(old, "sliding_window", None) == getattr(cfg, "sliding_window", None), old
    old._attn_implementation = "eager"
    new_model = AutoModelForCausalLM.from_config(cfg)
    old_model = AutoModelForCausalLM.from_config(old)
    for idx in layers:
        kind = cfg.layer_types[idx] if getattr(cfg, "layer_types", None) else "full_attention"
        for name in (f"{kind}_inv_freq", "inv_freq"):
            if hasattr(new_model.model.rotary_emb, name):
                a = getattr(new_model.model.rotary_emb, name)
                b = getattr(old_model.model.rotary_emb, name)
                assert torch.equal(a, b), (name, a, b)
                break
        else:
            raise RuntimeError("no inv_freq")


def describe_layer(cfg, model, idx: int) -> dict:
    attn = attention_module(model, idx)
    layer_types = getattr(cfg, "layer_types", None)
    kind = layer_types[idx] if layer_types else "full_attention"
    sliding = getattr(attn, "sliding_window", None)
    if sliding is None and kind == "sliding_attention":
        sliding = cfg.sliding_window
    if kind == "full_attention" and cfg.model_type in ("mistral", "phi3") and cfg.sliding_window:
        sliding = cfg.sliding_window  # every layer of these is windowed (create_sliding_window_causal_mask)
    info = {
        "layer": idx,
        "layerType": kind,
        "window": sliding,
        "headDim": int(attn.head_dim),
        "numHeads": int(cfg.num_attention_heads),
        "numKvHeads": int(attn.k_proj.out_features // attn.head_dim) if hasattr(attn, "k_proj") and attn.k_proj is not None
        else int(cfg.num_key_value_heads),
        "scaling": float(attn.scaling),
        "tensors": sorted(k for k, _ in attn.named_parameters()),
    }
    info["kind"] = "sliding" if sliding else "full"  # ModelLayer.kind (src/weights/model-layers.ts)
    info["rope"] = bool(getattr(attn, "use_rope", True))  # SmolLM3's NoPE layers: use_rope False
    # The family's own rotary module's frequencies for this layer's type (what position_embeddings are
    # made of): inv_freq [rotary dim / 2] and attention_scaling (cos and sin are multiplied by it).
    rotary = model.model.rotary_emb
    if hasattr(rotary, f"{kind}_inv_freq"):
        inv_freq, scaling = getattr(rotary, f"{kind}_inv_freq"), getattr(rotary, f"{kind}_attention_scaling")
    else:
        inv_freq, scaling = rotary.inv_freq, rotary.attention_scaling
    info["invFreq"] = [float(v) for v in inv_freq.to(torch.float64)]
    info["attentionScaling"] = float(scaling)
    softcap = getattr(attn, "attn_logit_softcapping", None)
    if softcap is not None:
        info["softcap"] = float(softcap)
    if getattr(attn, "sinks", None) is not None:
        info["sinks"] = True
    return info


def make_family(family: str, spec: dict) -> None:
    seed = SEED * 1000 + sum(map(ord, family))  # fixed, and different per family
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = build_config(spec)
    dtype = spec.get("dtype", torch.float32)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.eval()
    layers = spec["layers"]
    for idx in layers:
        randomize_attention(attention_module(model, idx), gen)
    keep = []
    for idx in layers:
        prefix = layer_prefix(model, idx)
        keep += [prefix + k for k, _ in attention_module(model, idx).named_parameters()]

    out_dir = OUT / family
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    files = write_checkpoint(model, out_dir, keep, spec.get("shard", False), dtype)
    configs = ["config.json"]
    if family in V4_FAMILIES:
        v4 = v4_spelling(json.loads((out_dir / "config.json").read_text()))
        check_v4(v4, cfg, layers)
        with open(out_dir / "config.v4.json", "w") as fh:
            json.dump(v4, fh, indent=2)
            fh.write("\n")
        configs.append("config.v4.json")
    if family == "gemma4":
        # Gemma 4's published config.json files give the full-attention layers' sizes as global_head_dim and
        # num_global_key_value_heads; transformers 5.18 reads them into per_layer_config and writes that.
        early = json.loads((out_dir / "config.json").read_text())
        per_layer = early.pop("per_layer_config")
        overrides = list(per_layer.values())
        assert all(o == overrides[0] for o in overrides)
        early["global_head_dim"] = overrides[0]["head_dim"]
        early["num_global_key_value_heads"] = overrides[0]["num_key_value_heads"]
        kwargs = {k: v for k, v in copy.deepcopy(early).items() if k not in ("model_type", "architectures", "transformers_version")}
        back = transformers.AutoConfig.for_model(early["model_type"], **kwargs)
        assert {str(k): dict(v) for k, v in back.to_dict()["per_layer_config"].items()} == per_layer, back.to_dict()["per_layer_config"]
        with open(out_dir / "config.global-keys.json", "w") as fh:
            json.dump(dict(sorted(early.items())), fh, indent=2)
            fh.write("\n")
        configs.append("config.global-keys.json")

    # Weights rounded to their stored dtype (as save_pretrained wrote them), then the whole model in float64.
    # Parameters only: the rotary modules' inv_freq buffers stay as transformers computes them (float32);
    # model.to(bfloat16) would round them too, which loading a checkpoint does not do.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(p.dtype))
    model = model.to(torch.float64)
    model.config._attn_implementation = "eager"
    if hasattr(model.config, "_experts_implementation"):
        model.config._experts_implementation = "eager"
    x = torch.randn((1, S, cfg.hidden_size), generator=gen, dtype=torch.float32).to(torch.float64)
    outs = expected_outputs(model, layers, x)

    x.to(torch.float32).numpy().astype("<f4").tofile(out_dir / "x.f32.bin")
    manifest_layers = []
    for idx in layers:
        out = outs[idx]
        assert out.shape == (1, S, cfg.hidden_size), out.shape
        assert torch.isfinite(out).all()
        cross_check(model, cfg, idx, x, out)
        fname = f"out-L{idx}.f64.bin"
        out.numpy().astype("<f8").tofile(out_dir / fname)
        info = describe_layer(cfg, model, idx)
        info["out"] = fname
        info["maxAbsOut"] = float(out.abs().max())
        manifest_layers.append(info)
    manifest = {
        "family": family,
        "modelType": cfg.model_type,
        "attentionClass": type(attention_module(model, layers[0])).__qualname__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "about": spec["about"],
        "dtype": str(dtype).replace("torch.", ""),
        "files": files,
        "configs": configs,
        "seqLen": S,
        "embedDim": cfg.hidden_size,
        "x": "x.f32.bin",
        "outDtype": "float64",
        "layers": manifest_layers,
    }
    with open(out_dir / "manifest.json", "w") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"{family:11s} {cfg.model_type:13s} layers {layers} dtype {manifest['dtype']:8s} "
          f"{size / 1024:6.1f} KiB  max|out| {max(l['maxAbsOut'] for l in manifest_layers):.3f}")


def main(argv: list[str]) -> None:
    names = argv or list(FAMILIES)
    for name in names:
        make_family(name, FAMILIES[name])


if __name__ == "__main__":
    main(sys.argv[1:])
