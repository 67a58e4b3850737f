"""Fault injection for the workload model: alpha-beta on fabrics it cannot time, FLOP/s
above the peak, numpy integers in layouts, overflowing GPU overrides, contradictory
model configs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.alpha_beta import alpha_beta_estimate
from fabricflow.errors import RoutingError, SolverError, SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.workload import compute as compute_module
from fabricflow.workload.flops import executed_flops_per_step, model_flops_per_step
from fabricflow.workload.model_spec import model_from_config


def _graph(links):
    return build_fabric(
        {
            "name": "g",
            "gpus": 2,
            "gpus_per_node": 1,
            "topology": {
                "type": "graph",
                "defaults": {"bandwidth": "100Gbps"},
                "nodes": [{"name": "s1"}],
                "gpus": ["g0", "g1"],
                "links": links,
            },
        }
    )


TINY = ff.Layout(tp=2, micro_batch=1, global_batch=2, seq_len=128)


def test_alpha_beta_without_nvlink_or_nic_is_a_spec_error():
    fabric = _graph([{"a": "g0", "b": "g1"}])
    with pytest.raises(SpecError, match=r"collectives.*alpha-beta.*nvlink.*nic.*'g'"):
        ff.step_time("llama3-8b", "h100-sxm", TINY, fabric, collectives="alpha-beta")
    groups = np.array([[0, 1]])
    with pytest.raises(SpecError, match="backend"):
        alpha_beta_estimate(fabric, "all_reduce", groups, 1e6)


def test_alpha_beta_without_a_path_is_a_routing_error():
    fabric = _graph([{"a": "g0", "b": "s1"}])
    with pytest.raises(RoutingError):
        ff.step_time("llama3-8b", "h100-sxm", TINY, fabric, collectives="alpha-beta")


def test_alpha_beta_single_rank_groups_stay_finite():
    fabric = _graph([{"a": "g0", "b": "g1"}])
    times = alpha_beta_estimate(fabric, "all_reduce", np.array([[0], [1]]), 1e6)
    assert np.all(np.isfinite(times)) and np.all(times > 0)


def test_non_finite_step_time_is_a_solver_error(monkeypatch):
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = ff.Layout(tp=8, dp=2, micro_batch=1, global_batch=2, seq_len=1024)
    monkeypatch.setattr(
        compute_module, "_pipeline_exposed", lambda t, comm: np.full(len(t), math.nan)
    )
    with pytest.raises(SolverError, match="'pp' part is nan"):
        ff.step_time("llama3-8b", "h100-sxm", layout, fabric)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_hardware_tflops_never_exceed_peak_for_long_sequences(recompute, attention):
    fabric = ff.load_fabric("dgx-h100-superpod")
    model = ff.load_model("llama3-8b")
    model = dataclasses.replace(model, attention=attention)
    gpu = ff.load_gpu("h100-sxm")
    seq = 2**21 if attention == "flash" else 2**15
    cp = 64 if attention == "flash" else 8
    layout = ff.Layout(tp=8, cp=cp, micro_batch=1, global_batch=8, seq_len=seq, recompute=recompute)
    result = ff.step_time(model, gpu, layout, fabric, check_memory=False)
    peak_tflops = gpu.peak(layout.precision) / 1e12
    assert result.hardware_tflops_per_gpu <= peak_tflops
    # Both rates share the step time: they differ exactly by the FLOP counts.
    executed = executed_flops_per_step(model, seq, 8, recompute)
    ratio = model_flops_per_step(model, seq, 8) / executed
    hardware_fraction = result.hardware_tflops_per_gpu / peak_tflops
    assert result.mfu == pytest.approx(ratio * hardware_fraction, rel=1e-12)
    if ratio <= 1:
        assert result.mfu <= hardware_fraction


def test_executed_flops_halve_causal_flash_attention():
    model = ff.load_model("llama3-8b")
    seq, batch = 2**20, 1
    flash = executed_flops_per_step(model, seq, batch, "none")
    # Attention dominates at this length: causal Flash runs (1 + 2.5) / 2 of the core
    # forward, where model FLOPs charge 3 x the full product.
    assert flash < model_flops_per_step(model, seq, batch)


def test_numpy_integers_are_layout_integers():
    layout = ff.Layout(
        tp=np.int64(8), micro_batch=np.int64(1), global_batch=np.int32(2), zero=np.int64(1)
    )
    assert layout.validate() is layout
    assert type(layout.tp) is int and type(layout.global_batch) is int and layout.zero == 1
    with pytest.raises(SpecError, match="layout.tp"):
        ff.Layout(tp=np.True_).validate()
    with pytest.raises(SpecError, match="layout.zero"):
        ff.Layout(zero=np.True_).validate()
    with pytest.raises(SpecError, match="layout.micro_batch"):
        ff.Layout(micro_batch=np.float64(1.0)).validate()


@pytest.mark.parametrize("value", ["1e999TFLOPS", 1e999, "1e300TFLOPS", float("nan")])
def test_overflowing_peak_says_finite(value):
    with pytest.raises(SpecError, match=r"gpu.peak_bf16: must be a finite number"):
        ff.load_gpu("h100-sxm", peak_bf16=value)


def test_infinite_compute_units_is_a_spec_error():
    with pytest.raises(SpecError, match="gpu.compute_units"):
        ff.load_gpu("h100-sxm", compute_units=float("inf"))


DENSE = {
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "intermediate_size": 4096,
    "vocab_size": 32000,
}


def test_zero_experts_with_top_k_is_a_contradiction():
    config = {**DENSE, "model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2}
    with pytest.raises(SpecError, match="model.num_local_experts.*num_experts_per_tok"):
        model_from_config(config)
    with pytest.raises(SpecError, match="model.num_local_experts"):
        ff.load_model("mixtral-8x7b", num_local_experts=0)
    # Saying both is a dense model.
    dense = model_from_config({**config, "num_experts_per_tok": 0})
    assert not dense.is_moe


def test_unknown_activation_refused_only_where_it_is_read():
    with pytest.raises(SpecError, match="model.hidden_act.*'bogus'"):
        model_from_config({**DENSE, "model_type": "custom", "hidden_act": "bogus"})
    with pytest.raises(SpecError, match="model.hidden_act"):
        model_from_config({**DENSE, "model_type": "custom", "hidden_act": ["silu"]})
    assert model_from_config({**DENSE, "model_type": "custom", "hidden_act": "SiLU"}).gated_ffn
    assert not model_from_config(
        {**DENSE, "model_type": "custom", "hidden_act": "gelu_new"}
    ).gated_ffn
    # llama fixes a gated FFN: hidden_act is not read, whatever it holds.
    for act in ("bogus", ["x"], None, 3):
        assert model_from_config({**DENSE, "model_type": "llama", "hidden_act": act}).gated_ffn


@pytest.mark.parametrize(
    ("link", "error"),
    [({"a": "g0", "b": "g1"}, "SpecError"), ({"a": "g0", "b": "s1"}, "RoutingError")],
)
def test_cli_alpha_beta_on_unusable_fabric_exits_2_without_a_plot(tmp_path, capsys, link, error):
    from fabricflow.cli import main

    spec = tmp_path / "g.yaml"
    spec.write_text(
        "{name: g, gpus: 2, gpus_per_node: 1, topology: {type: graph, defaults: "
        "{bandwidth: 100Gbps}, nodes: [{name: s1}], gpus: [g0, g1], links: "
        f"[{{a: {link['a']}, b: {link['b']}}}]}}}}\n"
    )
    plot = tmp_path / "ab.png"
    argv = (
        f"step --fabric {spec} --gpu h100-sxm --model llama3-8b --gpus 2 --tp 2 "
        f"--micro-batch 1 --global-batch 2 --seq 128 --collectives alpha-beta --json "
        f"--plot {plot}"
    ).split()
    assert main(argv) == 2
    assert error in capsys.readouterr().out
    assert not plot.exists()
