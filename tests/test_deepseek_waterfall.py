"""The DeepSeek-V3 GB200 waterfall study: its steps, settings and the --fast run."""

import importlib.util
import json
import pathlib

import pytest
import xarray as xr

from fabricflow.study.deepseek_waterfall import FAST, STEPS, step_settings, summary

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_steps_are_the_guides_table_and_accumulate():
    published = [s.published for s in STEPS]
    assert published[0] == 494.46 and published[-1] == 970.01
    assert published == sorted(published)  # every change of the guide helped
    final_step, layout, stack = step_settings()[-1]
    assert final_step is STEPS[-1]
    assert layout["dispatcher"] == "hybridep" and layout["fp8_norm_fusion"] is True
    assert stack["mxfp8_quantize_ops"] == 2.0
    # the changes reach the guide's final stack preset's choices
    from fabricflow.workload.stack import load_stack

    final = load_stack("mcore-dsv3-gb200")
    for key, value in layout.items():
        assert final.choices[key] == value, key
    assert final.mxfp8_quantize_ops == stack["mxfp8_quantize_ops"]


def test_summary_counts_a_change_the_model_misses_as_a_wrong_sign():
    rows = [
        {"step": "a", "published": 100.0, "predicted": 110.0},
        {"step": "b", "published": 120.0, "predicted": 110.0},
        {"step": "c", "published": 130.0, "predicted": 140.0},
    ]
    out = summary(rows)
    assert (out["signs_right"], out["changes"], out["within_10pct"]) == (1, 2, 2)


def test_study_script_fast(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "study", ROOT / "studies" / "deepseek_v3_waterfall.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    assert module.main([str(tmp_path), "--fast"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    with xr.open_dataset(tmp_path / "deepseek_v3_waterfall.nc") as data:
        data = data.load()
    assert list(data.step.values) == list(FAST)
    assert numbers["steps"] == len(FAST)
    predicted = data.predicted.values
    # DeepEP (with the changes before it) and then HybridEP each raise the throughput
    assert predicted[0] < predicted[1] < predicted[2]
    # HybridEP's measured bandwidth shortens the exposed expert all-to-all
    ep = data.breakdown.sel(part="ep").values
    assert ep[2] < ep[1]
    assert (tmp_path / "deepseek_v3_waterfall_steps.png").read_bytes()[:4] == b"\x89PNG"


def test_megatron_flops_halve_the_causal_attention_core():
    """Megatron-LM's counter (``num_floating_point_operations``) for a GQA model:
    ``3 * 2 * B s [L (h (q + k + v) + q s + q h + 3 h f) + h V]`` with the causal core
    at ``q s`` (half of ``QK^T`` and ``(QK^T) V``), hand-computed for Llama 3 8B."""
    import fabricflow as ff
    from fabricflow.workload.flops import megatron_flops_per_step

    m = ff.load_model("llama3-8b")
    b, s = 8, 8192
    h, f, layers, vocab = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    per_token = layers * (h * (q + 2 * kv) + q * s + q * h + 3 * h * f) + h * vocab
    assert megatron_flops_per_step(m, s, b) == pytest.approx(6.0 * b * s * per_token, rel=1e-12)
