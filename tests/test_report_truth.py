"""The report's numbers and the step's: one answer per layout, links counted as the flows
use them, failures said as they are, and the step options the command line takes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.commands import step as step_command
from fabricflow.errors import SpecError
from fabricflow.workload.layout import Layout
from fabricflow.workload.stack import load_stack
from fabricflow.workload.step_command import (
    STEP_FLAGS,
    SWITCHES,
    describe_step,
    step_arguments,
)

sys.path.insert(0, str(Path(__file__).parent))
from fabric_specs import fat_tree_spec  # noqa: E402

JOB = ["--fabric", "dgx-h100-superpod", "--model", "llama3-8b", "--gpu", "h100-sxm"]


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def _step_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    step_command.register(parser.add_subparsers().add_parser("step"))
    return parser


# ------------------------------------------------------------------ one answer per layout


def test_report_of_a_given_layout_equals_step_with_its_printed_settings(tmp_path):
    """'report --tp 8 --budget 0' on 16 GPUs times TP8 DP2, mb1, no recompute, ZeRO 1:
    'step' with exactly those flags gives the same number, and so does the step command
    the report prints (the report used to time it without sequence parallelism)."""
    code, out = _run(
        ["report", *JOB, "--gpus", "16", "--tp", "8", "--budget", "0"]
        + ["--fail-fractions", "0.5", "--fail-seeds", "1", "--out", str(tmp_path), "--json"]
    )
    assert code == 0
    report = json.loads(out)
    plain = ["step", *JOB, "--gpus", "16", "--tp", "8", "--micro-batch", "1"]
    plain += ["--global-batch", "16", "--seq", "4096", "--recompute", "none", "--zero", "1"]
    code, out = _run([*plain, "--json"])
    assert code == 0
    assert report["step_time_s"] == json.loads(out)["step_time_s"]
    words = shlex.split(report["step_command"])
    assert words[:2] == ["fabricflow", "step"]
    code, out = _run([*words[1:], "--json"])
    assert code == 0
    assert report["step_time_s"] == json.loads(out)["step_time_s"]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "the same step alone" in page and "--global-batch 16" in page
    # half the leaf-spine cables (bundles of 2) failed: the bundles that lost one of their
    # two cables stay up at half capacity, and the failure table says how many
    broken = ff.load_fabric("dgx-h100-superpod").without(link_kind="leaf", fraction=0.5, seed=0)
    failures = page.split('<section id="failures">')[1].split("</section>")[0]
    assert "links at reduced capacity" in failures
    cells = re.findall(r'<td class="num">([^<]*)</td>', failures.split("<tbody>")[1])
    assert int(cells[2].replace(",", "")) == broken.meta["reduced_links"] > 0


def test_every_layout_field_has_a_step_flag_that_round_trips():
    """Each Layout field away from its default is written as a step flag that the step
    command reads back into the same Layout (a field without a flag fails this test)."""
    fields = {f.name for f in dataclasses.fields(Layout)}
    assert fields - set(STEP_FLAGS) - set(SWITCHES) == {"framework_efficiency"}
    changed = Layout(
        tp=2,
        pp=2,
        dp=2,
        cp=2,
        vpp=2,
        sequence_parallel=False,
        tp_overlap=False,
        micro_batch=2,
        global_batch=64,
        seq_len=8192,
        recompute="selective",
        recompute_modules="core_attn,mlp",
        precision="fp8",
        zero=2,
        dp_overlap=False,
        pp_overlap=False,
        grad_reduce_dtype="fp32",
        moe_imbalance=1.3,
        offload_optimizer=0.5,
        offload_weights=0.25,
        offload_activations=0.125,
        pp_split=(9, 7),
        pipeline_schedule="interleaved",
        microbatch_group=3,
        cuda_graph_scope="attn",
        fused_cross_entropy=False,
        tp_backward_overlap=False,
        grad_accum_fusion=False,
        fp8_recipe="mxfp8",
        moe_router_fusion=False,
        cpu_binding=False,
        fp8_norm_fusion=True,
        fp8_dispatch=True,
    )
    others = Layout(
        dispatcher="deepep",
        ep=2,
        ep_overlap=True,
        expert_tp=1,
        moe_capacity_factor=1.25,
        cuda_graphs=True,
    )
    full = Layout(recompute="full", recompute_layers=2)
    parser = _step_parser()
    for layout in (changed, others, full, Layout()):
        words = step_arguments(
            layout, order="pp-tp-cp-ep-dp", placement="scattered", placement_seed=3
        )
        args = parser.parse_args(["step", "--fabric", "x", "--model", "y", "--gpus", "1", *words])
        assert step_command.layout_from_args(args) == layout, words
        assert (args.order, args.placement, args.seed) == ("pp-tp-cp-ep-dp", "scattered", 3)
    with pytest.raises(SpecError, match="framework_efficiency"):
        step_arguments(Layout(framework_efficiency=0.9))


def test_a_stack_is_named_and_switches_are_written_against_its_choices():
    """Over a stack that turns an overlap off, a layout that keeps it on says so: the
    command names the stack (its parameters time the step) and writes --dp-overlap."""
    stack = load_stack("megatron-2022")
    assert stack.choices["dp_overlap"] is False
    layout = stack.layout_for(tp=2, dp=4, global_batch=8, dp_overlap=True)
    words = step_arguments(layout, stack="megatron-2022")
    assert words[-2:] == ["--stack", "megatron-2022"] and "--dp-overlap" in words
    args = _step_parser().parse_args(
        ["step", "--fabric", "x", "--model", "y", "--gpus", "8", *words]
    )
    assert step_command.layout_from_args(args) == layout


def test_a_calibrated_report_prints_a_calibrated_step_command():
    """A report timed with --calibration prints a step command that reads the same
    calibration (it printed none: step then gave the uncalibrated time)."""
    from fabricflow.commands.report import step_command_of

    words = step_arguments(Layout(tp=8), calibration="site cal.yaml")
    assert words[-2:] == ["--calibration", "site cal.yaml"]
    args = _step_parser().parse_args(
        ["step", "--fabric", "x", "--model", "y", "--gpus", "8", *words]
    )
    assert args.calibration == "site cal.yaml"
    job = {
        "layout": dataclasses.asdict(Layout(tp=8, global_batch=8)),
        "order": "tp-cp-ep-dp-pp", "placement": "deployed", "placement_seed": 0, "routing": "auto",
        "algorithms": {}, "collectives": "fabric",
    }  # fmt: skip
    report_args = argparse.Namespace(
        fabric="dgx-h100-superpod", model="llama3-8b", gpu="h100-sxm", gpus=8,
        calibration="cal.yaml", gpus_per_node=None, nic_bandwidth=None, companion=None,
    )  # fmt: skip
    assert step_command_of(report_args, job).endswith("--calibration cal.yaml")


def test_step_options_are_written_and_described():
    options = {"routing": "spray", "algorithms": {"dp": "ring"}, "collectives": "alpha-beta"}
    words = step_arguments(Layout(tp=8), **options)
    assert words[-6:] == [
        "--routing",
        "spray",
        "--collectives",
        "alpha-beta",
        "--algorithm",
        "dp=ring",
    ]
    text = describe_step(Layout(tp=8, sequence_parallel=False), **options)
    assert "no SP" in text and "routing spray" in text and "dp ring" in text


def test_step_takes_routing_algorithms_and_cc_from_the_command_line():
    base = ["step", *JOB, "--gpus", "16", "--tp", "8", "--micro-batch", "1"]
    base += ["--global-batch", "16", "--seq", "4096", "--json"]
    code, out = _run([*base, "--routing", "ecmp", "--algorithm", "dp=ring"])
    assert code == 0
    details = json.loads(out)
    assert details["routing"] == "ecmp" and details["algorithms"] == {"dp": "ring"}
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = Layout(tp=8, dp=2, global_batch=16, seq_len=4096)
    direct = ff.step_time(
        "llama3-8b", "h100-sxm", layout, fabric, routing="ecmp", algorithms={"dp": "ring"}
    )
    assert details["step_time_s"] == direct.step_time_s
    code, out = _run([*base, "--cc", "hpcc"])
    assert code == 0
    with_cc = json.loads(out)
    assert with_cc["cc"] == "hpcc"
    ideal = ff.step_time("llama3-8b", "h100-sxm", layout, fabric)
    # the data-parallel all-reduce crosses the network: HPCC's eta < 1 slows it
    assert with_cc["step_time_s"] > ideal.step_time_s


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--algorithm", "dp"], "--algorithm"),
        (["--algorithm", "xx=ring"], "--algorithm"),
        (["--algorithm", "dp=ring", "--algorithm", "dp=tree"], "--algorithm dp"),
        (["--algorithm", "dp=foo"], "--algorithm dp"),
        (["--routing", "foo"], "--routing"),
    ],
)
def test_step_refuses_bad_routing_and_algorithms_naming_the_flag(flags, field, capsys):
    base = ["step", *JOB, "--gpus", "16", "--tp", "8", "--micro-batch", "1"]
    base += ["--global-batch", "16", "--seq", "4096"]
    assert main([*base, *flags]) == 2
    assert f"error: {field}" in capsys.readouterr().err


# ------------------------------------------------------------------ links the flows use


@pytest.mark.parametrize(
    ("routing", "leaf", "nic"), [("ecmp", 8, 8), ("adaptive", 16, 8), ("spray", 16, 8)]
)
def test_utilization_counts_every_link_the_flows_use(routing, leaf, nic):
    """Hand count on a 2-tier k=4 fat-tree (8 hosts, 4 leaves of 2 hosts and 2 uplinks,
    2 spines): send/recv between hosts 0-2 and 4-6, both directions, four flows from
    one leaf to another. ECMP: each flow one uplink and one downlink, all distinct: 8 of
    the 16 leaf links. Spray and adaptive: each flow both uplinks of its leaf and both
    downlinks into the other: all 16. Every flow crosses its two NIC links: 8."""
    from fabricflow.collective import prepare_collective
    from fabricflow.fabric.spec import build_fabric
    from fabricflow.report.build import collective_utilization

    fabric = build_fabric(fat_tree_spec(4, tiers=2))
    assert int((fabric.link_kind == "leaf").sum()) == 16
    prepared = prepare_collective(fabric, "sendrecv", np.array([[0, 2], [4, 6]]), routing=routing)
    peak, _ = collective_utilization(prepared, 2**20)
    assert int(((peak > 0) & (fabric.link_kind == "leaf")).sum()) == leaf
    assert int(((peak > 0) & (fabric.link_kind == "nic")).sum()) == nic


@pytest.mark.parametrize("name", ["fat-tree-k16", "dgx-h100-superpod", "alibaba-hpn-pod"])
def test_adaptive_link_loads_equal_spray_link_by_link(name):
    from fabricflow.routing.clos import adaptive_link_values

    fabric = ff.load_fabric(name)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 256, 600), rng.integers(0, 256, 600)
    src, dst = src[src != dst], dst[src != dst]
    adaptive = ff.route(fabric, src, dst, policy="adaptive")
    spray = ff.route(fabric, src, dst, policy="spray")
    assert adaptive.policy == "adaptive"
    loads = adaptive_link_values(fabric, adaptive.link_load())
    np.testing.assert_allclose(loads, spray.link_load(), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ failures said


def test_partly_failed_bundles_are_reported(capsys):
    """1 % of the spine cables of meta-llama3-24k (bundles of 7) fail: no link goes down,
    but the bundles that lost a cable run at reduced capacity; step says so."""
    from fabricflow.fabric.summary import failure_counts, failure_text

    fabric = ff.load_fabric("meta-llama3-24k")
    assert failure_text(failure_counts(fabric)) == "none"
    assert failure_text(ff.load_fabric("dgx-h100-superpod").summary()) == "none"
    broken = fabric.without(link_kind="spine", fraction=0.01, seed=0)
    counts = failure_counts(broken)
    reduced = (broken.capacity < fabric.capacity) & broken.link_up
    assert counts["reduced_links"] == int(reduced.sum()) > 0
    assert counts["failed_links"] == int((~broken.link_up).sum())
    again = broken.without(link_kind="spine", fraction=0.01, seed=1)
    reduced = (again.capacity < fabric.capacity) & again.link_up
    assert failure_counts(again)["reduced_links"] == int(reduced.sum())
    argv = ["step", "--fabric", "meta-llama3-24k", "--model", "llama3-8b", "--gpu", "h100-sxm"]
    argv += ["--gpus", "32", "--tp", "8", "--micro-batch", "1", "--global-batch", "32"]
    argv += ["--seq", "4096", "--fail", "spine:0.01"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"{counts['reduced_links']} up at reduced capacity" in text
    assert main([*argv, "--json"]) == 0
    failures = json.loads(capsys.readouterr().out)
    assert failures["reduced_links"] == counts["reduced_links"]
    assert failures["failed_cables"] == counts["failed_cables"] > 0


def test_utilization_routes_as_the_headline_step_for_any_report_seed(monkeypatch):
    """``report --seed`` seeds the placement and the failure draws; the step time routes
    with routing seed 0 (``details["routing_seed"]``), and the utilization section must
    route its collectives the same way, or it re-solves other flows than the headline."""
    from fabricflow.report import build

    seeds = []

    class Recording(build.CollectiveCache):
        def __init__(self, *args, **kwargs):
            seeds.append(kwargs.get("seed", 0))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(build, "CollectiveCache", Recording)
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = Layout(tp=8, dp=4, micro_batch=1, global_batch=32, seq_len=2048)
    report = build.build_report(
        fabric, "llama3-8b", "h100-sxm", 32, layout=layout, budget_s=0,
        fail_fractions=(0.3,), fail_seeds=1, seed=5,
    )  # fmt: skip
    sections = {section["id"]: section for section in report["sections"]}
    assert seeds == [0]  # the utilization section's cache: the step's routing seed
    assert sections["utilization"]["settings"]["routing_seed"] == 0
    assert sections["step"]["settings"]["seed"] == 5  # the placement seed is the report's
