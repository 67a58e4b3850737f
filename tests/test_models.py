"""Model specs from Hugging Face config fields, presets, and FLOPs derived from shapes."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricflow.errors import SpecError
from fabricflow.workload.flops import (
    forward_flops_per_token,
    hardware_flops_per_step,
    layer_flops_per_token,
    model_flops_per_step,
)
from fabricflow.workload.model_spec import list_models, load_model, model_from_config


@pytest.mark.parametrize(
    "name, billions",
    [
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.55),
        ("llama3-405b", 405.85),
        ("mixtral-8x7b", 46.70),
        ("mixtral-8x22b", 140.6),
        ("deepseek-v3", 671.0),
        ("gpt3-175b", 174.6),
        ("megatron-1.7b", 1.65),
        ("megatron-76.1b", 76.0),
    ],
)
def test_preset_parameter_counts_match_published_sizes(name, billions):
    assert load_model(name).num_parameters() / 1e9 == pytest.approx(billions, rel=0.01)


def test_every_listed_preset_loads():
    names = list_models()
    for required in (
        "gpt3-175b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "deepseek-v3",
        "megatron-1.7b",
        "megatron-39.1b",
    ):
        assert required in names
    for name in names:
        load_model(name)


def test_ffn_type_follows_model_type_as_hugging_face_does():
    base = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        "vocab_size": 1000,
    }
    assert model_from_config({**base, "model_type": "llama"}).gated_ffn
    assert model_from_config({**base, "model_type": "mixtral"}).gated_ffn
    assert not model_from_config({**base, "model_type": "gpt_neox"}).gated_ffn
    gpt2 = model_from_config(
        {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000}
    )
    assert not gpt2.gated_ffn and gpt2.intermediate_size == 256 and gpt2.hidden_dropout == 0.1


def test_moe_and_mla_fields():
    v3 = load_model("deepseek-v3")
    assert v3.is_moe and v3.is_mla
    assert (v3.num_experts, v3.experts_per_token, v3.num_shared_experts, v3.first_dense_layers) == (
        256,
        8,
        1,
        3,
    )
    assert v3.qk_head_dim == 192 and v3.value_head_dim == 128
    # Active parameters per token ~37B (DeepSeek-V3 report).
    dense = v3.num_dense_layers * sum(v3.layer_parameters(False).values())
    moe = v3.layer_parameters(True)
    expert = moe["experts"] / v3.num_experts
    active = dense + v3.num_moe_layers * (
        moe["attention"] + moe["norm"] + moe["shared"] + v3.experts_per_token * expert
    )
    active += 2 * v3.vocab_size * v3.hidden_size
    assert active / 1e9 == pytest.approx(37.5, rel=0.03)


def test_loads_config_json_and_yaml_paths(tmp_path):
    config = {
        "model_type": "llama",
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 344,
        "vocab_size": 5000,
    }
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    spec = load_model(str(path))
    assert spec.name == "tiny" and spec.num_kv_heads == 2
    yaml_path = tmp_path / "tiny.yaml"
    yaml_path.write_text("\n".join(f"{k}: {v}" for k, v in config.items()))
    assert load_model(str(yaml_path)).intermediate_size == 344
    assert load_model("llama3-8b", num_hidden_layers=2).num_layers == 2


@pytest.mark.parametrize(
    "config, field",
    [
        (
            {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 10,
                "num_key_value_heads": 3,
            },
            "num_key_value_heads",
        ),
        ({"num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}, "hidden_size"),
        (
            {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 10,
                "num_local_experts": 4,
                "num_experts_per_tok": 5,
            },
            "num_experts_per_tok",
        ),
    ],
)
def test_bad_configs_name_the_field(config, field):
    with pytest.raises(SpecError, match=field):
        model_from_config(config)


def test_unknown_preset_lists_presets():
    with pytest.raises(SpecError, match="llama3-8b"):
        load_model("llama-9000")


@pytest.mark.parametrize("name", ["megatron-1.7b", "megatron-76.1b", "gpt3-175b"])
def test_flops_equal_megatron_formula_for_dense_gpt(name):
    model = load_model(name)
    b, s, layers, h, v = 512, 2048, model.num_layers, model.hidden_size, model.vocab_size
    eq3 = 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    no_recompute = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h))
    assert hardware_flops_per_step(model, s, b, "full") == pytest.approx(eq3, rel=1e-12)
    assert model_flops_per_step(model, s, b) == pytest.approx(no_recompute, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    heads=st.sampled_from([4, 8, 16]),
    kv_div=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([32, 64, 128]),
    ffn=st.integers(64, 4096),
    gated=st.booleans(),
    seq=st.integers(1, 8192),
)
def test_layer_flops_are_twice_the_weights_plus_attention(heads, kv_div, head_dim, ffn, gated, seq):
    config = {
        "model_type": "llama" if gated else "gpt_neox",
        "hidden_size": heads * head_dim,
        "num_hidden_layers": 3,
        "num_attention_heads": heads,
        "num_key_value_heads": heads // kv_div,
        "intermediate_size": ffn,
        "vocab_size": 1000,
    }
    model = model_from_config(config)
    layer = model.layer_parameters(False)
    weights = layer["attention"] + layer["dense_ffn"]
    attention = 4 * seq * heads * head_dim
    assert layer_flops_per_token(model, seq, moe=False) == pytest.approx(2 * weights + attention)
    per_token = forward_flops_per_token(model, seq)
    assert per_token["logits"] == 2 * model.hidden_size * model.vocab_size


def test_moe_flops_count_only_active_experts():
    model = load_model("mixtral-8x7b")
    moe = layer_flops_per_token(model, 4096, moe=True)
    dense_equivalent = layer_flops_per_token(model, 4096, moe=False)
    expert = 2 * 3 * model.hidden_size * model.moe_intermediate_size
    router = 2 * model.hidden_size * model.num_experts
    assert moe == pytest.approx(dense_equivalent + expert + router)
