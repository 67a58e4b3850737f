"""Bad inputs to the workload model (``step_time``, layouts, model and GPU specs, placement,
memory, FLOPs, the alpha-beta estimate, and ``step`` on a fabric it cannot time): a named
error that names the field, never a silently wrong number."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from fault_helpers import raises_named as _raises_named

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.collective.alpha_beta import alpha_beta_estimate
from fabricflow.errors import RoutingError, SolverError, SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.workload import Layout
from fabricflow.workload import compute as compute_module
from fabricflow.workload.flops import executed_flops_per_step, model_flops_per_step
from fabricflow.workload.model_spec import model_from_config

FABRIC = "dgx-h100-superpod"


def _layout(**changes) -> Layout:
    base = dict(tp=2, dp=8, micro_batch=1, global_batch=16, seq_len=2048)
    return Layout(**{**base, **changes})


# ---------------------------------------------------------------------- workload


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"moe_imbalance": "x"}, "layout.moe_imbalance"),
        ({"moe_imbalance": float("nan")}, "layout.moe_imbalance"),
        ({"framework_efficiency": "x"}, "layout.framework_efficiency"),
        ({"sequence_parallel": "no"}, "layout.sequence_parallel"),
        ({"dp_overlap": "false"}, "layout.dp_overlap"),
        ({"zero": True}, "layout.zero"),
        ({"zero": "3"}, "layout.zero"),
        ({"tp": 2.0}, "layout.tp"),
        ({"tp": 0}, "layout.tp"),
        ({"tp": 3, "dp": 4}, "layout.tp"),
        ({"recompute": "partial"}, "layout.recompute"),
        ({"ep": 2}, "layout.ep"),
        ({"vpp": 2}, "layout.vpp"),
        ({"cp": 3, "dp": 2}, "layout.seq_len"),
        ({"dp": 1024}, "layout.global_batch"),
    ],
)
def test_step_time_bad_layouts(fabric, changes, field):
    layout = _layout(**changes)
    _raises_named(lambda: ff.step_time("llama3-8b", "h100-sxm", layout, fabric), field, SpecError)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"layout": {"tp": 2}}, "layout"),
        ({"fabric": FABRIC}, "fabric"),
        ({"fabric": None}, "fabric"),
        ({"order": "tp-dp"}, "order"),
        ({"order": "tp-tp-cp-ep-dp-pp"}, "order"),
        ({"placement": "random"}, "placement"),
        ({"placement": "scattered", "placement_seed": -1}, "seed"),
        ({"collectives": "nccl"}, "collectives"),
        ({"model": "gpt-7"}, "model"),
        ({"gpu": "h200-xyz"}, "gpu"),
    ],
)
def test_step_time_bad_arguments(fabric, arguments, field):
    arguments = {
        "model": "llama3-8b",
        "gpu": "h100-sxm",
        "layout": _layout(),
        "fabric": fabric,
        **arguments,
    }
    model, gpu, layout, fab = (arguments.pop(k) for k in ("model", "gpu", "layout", "fabric"))
    _raises_named(lambda: ff.step_time(model, gpu, layout, fab, **arguments), field, SpecError)


def test_step_time_refuses_a_placement_of_another_layout_or_order(fabric):
    other = ff.place(_layout(tp=4, dp=4), fabric.num_gpus)
    _raises_named(
        lambda: ff.step_time("llama3-8b", "h100-sxm", _layout(), fabric, placement=other),
        "placement",
        SpecError,
    )
    mine = ff.place(_layout(), fabric.num_gpus, order="dp-tp-cp-ep-pp")
    _raises_named(
        lambda: ff.step_time(
            "llama3-8b", "h100-sxm", _layout(), fabric, placement=mine, order="tp-dp-cp-ep-pp"
        ),
        "order",
        SpecError,
    )
    same = ff.step_time("llama3-8b", "h100-sxm", _layout(), fabric, placement=mine)
    direct = ff.step_time("llama3-8b", "h100-sxm", _layout(), fabric, order="dp-tp-cp-ep-pp")
    assert same.step_time_s == direct.step_time_s


def test_step_time_of_absurd_batches_is_finite_and_proportional(fabric):
    one = ff.step_time("llama3-8b", "h100-sxm", _layout(global_batch=16 * 2**20), fabric)
    two = ff.step_time("llama3-8b", "h100-sxm", _layout(global_batch=32 * 2**20), fabric)
    assert np.isfinite(one.step_time_s) and 0 < one.mfu < 1
    # the step is bound by micro-batches at this size: twice the batch, ~twice the time
    np.testing.assert_allclose(two.step_time_s / one.step_time_s, 2.0, rtol=1e-3)


@pytest.mark.parametrize(
    ("spec", "overrides", "field"),
    [
        ("gpt-7", {}, "model"),
        (None, {}, "model"),
        (5, {}, "model"),
        ({}, {}, "model.hidden_size"),
        ("llama3-8b", {"num_attention_heads": 0}, "model.num_heads"),
        ("llama3-8b", {"num_attention_heads": 7}, "model.hidden_size"),
        ("llama3-8b", {"num_key_value_heads": 64}, "model.num_key_value_heads"),
        ("llama3-8b", {"num_hidden_layers": True}, "model.num_hidden_layers"),
        ("llama3-8b", {"num_hidden_layers": 2.5}, "model.num_hidden_layers"),
        ("llama3-8b", {"num_hidden_layers": [1]}, "model.num_hidden_layers"),
        ("llama3-8b", {"vocab_size": 1e300}, "model.vocab_size"),
        ("llama3-8b", {"hidden_size": "abc"}, "model.hidden_size"),
        ("llama3-8b", {"rope_scaling": {"a": 1}}, "model.rope_scaling"),
        ("mixtral-8x7b", {"num_experts_per_tok": 9}, "model.num_experts_per_tok"),
    ],
)
def test_load_model_bad_inputs(spec, overrides, field):
    _raises_named(lambda: ff.load_model(spec, **overrides), field, SpecError)


@pytest.mark.parametrize(
    ("spec", "overrides", "field"),
    [
        ("h200-xyz", {}, "gpu"),
        (None, {}, "gpu"),
        ({"name": "x", "peak_bf16": "1PFLOPS", "hbm": "80GB"}, {}, "gpu.hbm_bandwidth"),
        ("h100-sxm", {"hbm": True}, "gpu.hbm"),
        ("h100-sxm", {"hbm": "abc"}, "gpu.hbm"),
        ("h100-sxm", {"hbm": -1}, "gpu.hbm"),
        ("h100-sxm", {"hbm": "1e400GB"}, "gpu.hbm"),
        ("h100-sxm", {"peak_bf16": 0}, "gpu.peak_bf16"),
        ("h100-sxm", {"compute_units": 1.5}, "gpu.compute_units"),
        ("h100-sxm", {"gemm_efficiency": 2.0}, "gpu.gemm_efficiency"),
        ("h100-sxm", {"gemm_efficiency": float("nan")}, "gpu.gemm_efficiency"),
        ("h100-sxm", {"foo": 1}, "gpu"),
    ],
)
def test_load_gpu_bad_inputs(spec, overrides, field):
    _raises_named(lambda: ff.load_gpu(spec, **overrides), field, SpecError)


@pytest.mark.parametrize(
    ("layout", "num_gpus", "options", "field"),
    [
        (_layout(tp=0), 1024, {}, "layout.tp"),
        ({"tp": 2}, 1024, {}, "layout"),
        (_layout(), "1024", {}, "num_fabric_gpus"),
        (_layout(), 0, {}, "num_fabric_gpus"),
        (_layout(), 8, {}, "gpus"),
        (_layout(), 1024, {"order": "tp-cp-ep-dp-xx"}, "order"),
        (_layout(), 1024, {"placement": "scattered", "gpus_per_node": 0}, "gpus_per_node"),
        (_layout(), 1024, {"placement": "scattered", "seed": 1.5}, "seed"),
    ],
)
def test_place_bad_inputs(layout, num_gpus, options, field):
    _raises_named(lambda: ff.place(layout, num_gpus, **options), field, SpecError)


def test_memory_per_gpu_bad_inputs_and_a_checked_answer():
    model = ff.load_model("llama3-8b")
    _raises_named(lambda: ff.memory_per_gpu("llama3-8b", _layout()), "model", SpecError)
    _raises_named(lambda: ff.memory_per_gpu(model, _layout(tp=0)), "layout.tp", SpecError)
    weights = ff.memory_per_gpu(model, _layout()).weights
    # bf16 weights of the 8.03e9 parameters, split over tp = 2
    np.testing.assert_allclose(weights, 2 * 8.03e9 / 2, rtol=1e-3)


@pytest.mark.parametrize("backend", ["fabric", "alpha-beta"])
@pytest.mark.parametrize(
    ("op", "groups", "size", "field"),
    [
        ("all_reduce", np.arange(16).reshape(2, 8), -5.0, "size: "),
        ("all_reduce", np.arange(16).reshape(2, 8), float("nan"), "size: "),
        ("all_reduce", np.arange(16).reshape(2, 8), "1MB", "size: "),
        ("all_reduce", np.arange(16).reshape(2, 8), True, "size: "),
        ("all_reduce", np.arange(8), 1e6, "groups"),
        ("all_reduce", [[0, 5000]], 1e6, "groups"),
        ("all_reduce", [[0, 1], [2]], 1e6, "groups"),
        ("allreduce_x", np.arange(16).reshape(2, 8), 1e6, "op"),
    ],
)
def test_step_model_collective_seconds_bad_inputs(fabric, backend, op, groups, size, field):
    from fabricflow.collective.comm import collective_seconds

    _raises_named(
        lambda: collective_seconds(fabric, op, groups, size, backend=backend), field, SpecError
    )


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
