"""Pipeline stages: uneven layer splits, DualPipe and jobs over several GPU types."""

import dataclasses
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.gpu_memory import in_flight_chunks, rank_memory, rank_parameters
from fabricflow.workload.hetero import (
    _layer_seconds,
    job_gpus,
    load_job,
    parse_gpu_mix,
    split_for_gpus,
)
from fabricflow.workload.layer_cost import embedding_cost, head_cost
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.step import step_time

LLAMA8B = load_model("llama3-8b")  # 32 layers
MIXTRAL = load_model("mixtral-8x7b")  # 32 layers, 8 experts


@pytest.fixture(scope="module")
def h100():
    return ff.load_fabric("dgx-h100-superpod")


# ---------------------------------------------------------------- uneven splits


@settings(max_examples=150, deadline=None)
@given(
    layers=st.integers(1, 200),
    pp=st.integers(1, 24),
    vpp=st.integers(1, 4),
)
def test_automatic_split_conserves_layers_and_balances(layers, pp, vpp):
    if vpp > 1 and pp == 1:
        vpp = 1
    model = dataclasses.replace(LLAMA8B, num_layers=layers)
    layout = Layout(pp=pp, vpp=vpp, global_batch=pp)
    stages = pp * vpp
    if layers + 2 < stages and layers % stages:
        with pytest.raises(SpecError, match="cannot fill"):
            layout.validate(model)
        return
    layout.validate(model)
    split = layout.stage_split(model)
    ranks = layout.rank_layers(model)
    assert len(split) == stages and len(ranks) == pp
    assert sum(split) == layers and sum(ranks) == layers  # the layer count is conserved
    assert min(split) >= 0 and (stages <= 2 or min(split[1:-1]) >= 1)
    # embedding and loss as one layer-equivalent each: the stages differ by one at most
    units = list(split)
    if stages > 1 and layers % stages:
        units[0] += 1
        units[-1] += 1
    assert max(units) - min(units) <= 1
    if stages > 2:  # the ends are never heavier than a middle stage
        assert split[0] <= max(split[1:-1]) and split[-1] <= max(split[1:-1])


def test_published_uneven_splits():
    # Llama 3 405B (Llama 3 paper): 126 layers on 16 stages, first and last one lighter
    llama = Layout(pp=16).rank_layers(load_model("llama3-405b"))
    assert llama == (7,) + (8,) * 14 + (7,)
    # DeepSeek-V3: 61 layers on 16 stages; 63 layer-equivalents, the light one first
    deepseek = Layout(pp=16).rank_layers(load_model("deepseek-v3"))
    assert deepseek == (2,) + (4,) * 14 + (3,)
    # interleaved: a rank sums its virtual stages (rank r holds stages r, r + pp, ...)
    interleaved = Layout(pp=16, vpp=4)
    assert interleaved.rank_layers(load_model("llama3-405b")) == (7,) + (8,) * 14 + (7,)
    assert Layout(pp=4, vpp=2).stage_split(dataclasses.replace(LLAMA8B, num_layers=30)) == (
        3,
        4,
        4,
        4,
        4,
        4,
        4,
        3,
    )
    assert Layout(pp=4).stage_layers(LLAMA8B) == (8, 8, 8)


@pytest.mark.parametrize(
    "split, match",
    [
        ((8, 8, 8), "one per rank"),
        ((8, 8, 8, 7), "sums to 31"),
        ((9, 0, 15, 8), ">= 1 layer"),
        ((-1, 17, 8, 8), ">= 1 layer"),
        ((8.0, 8, 8, 8), "sequence of integers"),
        ("8,8,8,8", "sequence of integers"),
    ],
)
def test_pp_split_is_validated(split, match):
    with pytest.raises(SpecError, match=match) as error:
        Layout(pp=4, pp_split=split).validate(LLAMA8B)
    assert error.value.field == "layout.pp_split"


def test_pp_split_accepts_lists_and_empty_ends():
    layout = Layout(pp=4, pp_split=[0, 16, 16, 0]).validate(LLAMA8B)
    assert layout.pp_split == (0, 16, 16, 0) and layout.rank_layers(LLAMA8B) == (0, 16, 16, 0)
    assert Layout(pp=4, pp_split=(8, 8, 8, 8)) == Layout(pp=4, pp_split=[8, 8, 8, 8])


def test_every_rank_is_timed_from_its_own_layers(h100):
    base = dict(tp=8, pp=4, dp=1, micro_batch=1, global_batch=8, seq_len=2048)
    auto = step_time("llama3-8b", "h100-sxm", Layout(**base), h100)
    same = step_time("llama3-8b", "h100-sxm", Layout(pp_split=(8, 8, 8, 8), **base), h100)
    assert same.step_time_s == pytest.approx(auto.step_time_s, rel=1e-12)
    heavy = step_time("llama3-8b", "h100-sxm", Layout(pp_split=(6, 14, 6, 6), **base), h100)
    times = heavy.details["micro_batch_s"]
    assert heavy.details["slowest_rank"] == "rank 1"
    # the middle ranks differ only by their layers: 14 vs 6 layers of the same cost
    per_layer = (times["rank 1"] - times["rank 2"]) / 8
    assert times["rank 2"] == pytest.approx(6 * per_layer, rel=1e-9)
    m = heavy.details["num_micro_batches"]
    assert heavy.breakdown["compute"] + heavy.breakdown["tp"] == pytest.approx(m * times["rank 1"])
    # fill and drain pass once through each of the other ranks
    assert heavy.breakdown["bubble"] == pytest.approx(sum(times.values()) - times["rank 1"])
    assert heavy.step_time_s > auto.step_time_s
    # the heaviest rank's memory is checked, even in the middle of the pipeline
    assert heavy.memory.rank == "rank 1"
    memories = rank_memory(LLAMA8B, Layout(pp_split=(6, 14, 6, 6), **base))
    assert heavy.memory == max(memories, key=lambda e: e.total)


def test_too_much_on_one_middle_rank_is_refused(h100):
    layout = Layout(tp=1, pp=4, dp=8, micro_batch=1, global_batch=64, seq_len=4096)
    step_time("llama3-8b", "h100-sxm", layout, h100)  # the even split fits
    crowded = dataclasses.replace(layout, pp_split=(1, 28, 1, 2), micro_batch=2)
    with pytest.raises(SpecError, match="rank 1 pipeline rank"):
        step_time("llama3-8b", "h100-sxm", crowded, h100)


# ---------------------------------------------------------------- DualPipe

MOE = dict(pp=4, dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=1024, zero=1)


def test_dualpipe_constraints():
    with pytest.raises(SpecError, match="even pp"):
        Layout(pp=3, dp=8, global_batch=48, pipeline_schedule="dualpipe").validate()
    with pytest.raises(SpecError, match=">= 2 x pp = 8"):
        Layout(pp=4, dp=8, global_batch=48, pipeline_schedule="dualpipe").validate()
    with pytest.raises(SpecError, match="means vpp = 1"):
        Layout(pp=4, vpp=2, global_batch=8, pipeline_schedule="dualpipe").validate()
    with pytest.raises(SpecError, match="interleaved needs vpp"):
        Layout(pp=4, global_batch=8, pipeline_schedule="interleaved").validate()
    with pytest.raises(SpecError, match="one of"):
        Layout(pipeline_schedule="zb").validate()
    assert Layout(pp=4, vpp=2, global_batch=8).schedule == "interleaved"


def test_dualpipe_memory_two_weight_copies_and_pp_plus_one_chunks():
    one = Layout(**MOE)
    dual = Layout(pipeline_schedule="dualpipe", **MOE)
    assert [in_flight_chunks(dual, r) for r in range(4)] == [5] * 4
    assert [in_flight_chunks(one, r) for r in range(4)] == [4, 3, 2, 1]
    single, double = rank_parameters(MIXTRAL, one), rank_parameters(MIXTRAL, dual)
    # rank r keeps stages r and pp-1-r: twice the weights in all, the same on paired ranks
    assert sum(map(sum, double)) == pytest.approx(2 * sum(map(sum, single)))
    assert double[1] == pytest.approx(tuple(a + b for a, b in zip(single[1], single[2])))
    assert sum(double[0]) == pytest.approx(sum(double[3]))


def test_dualpipe_bubble_and_hidden_all_to_all(h100):
    one = step_time("mixtral-8x7b", "h100-sxm", Layout(**MOE), h100, check_memory=False)
    dual = step_time(
        "mixtral-8x7b",
        "h100-sxm",
        Layout(pipeline_schedule="dualpipe", **MOE),
        h100,
        check_memory=False,
    )
    assert dual.details["pipeline_schedule"] == "dualpipe"
    slow = max(dual.details["micro_batch_s"].values())
    # (p/2 - 1)(F&B + B - 3W) is less than one pair, below 1F1B's (p - 1) micro-batches
    assert 0 < dual.breakdown["bubble"] < slow
    assert dual.breakdown["bubble"] < one.breakdown["bubble"] / 2
    # the chunk pair hides all-to-all behind compute; 1F1B without overlap exposes it all
    assert dual.breakdown["ep"] < one.breakdown["ep"]
    # each micro-batch passes one of a rank's two stages: the end ranks average the
    # embedding and the head, so the slowest DualPipe rank is a little lighter than 1F1B's
    # last rank (8 layers + head)
    assert 0.95 * one.breakdown["compute"] < dual.breakdown["compute"] < one.breakdown["compute"]
    assert dual.step_time_s < one.step_time_s


# ---------------------------------------------------------------- several GPU types


def test_parse_gpu_mix_and_errors():
    assert parse_gpu_mix("h100-sxm:1024, h20:1024") == [("h100-sxm", 1024), ("h20", 1024)]
    for bad, match in (
        ("h100-sxm:1024,h20", "TYPE:COUNT"),
        ("h100-sxm:-4", "TYPE:COUNT"),
        ("h100-sxm:0", ">= 1"),
        ("h20:8,h20:8", "given twice"),
        ("", "TYPE:COUNT"),
    ):
        with pytest.raises(SpecError, match=match):
            parse_gpu_mix(bad)


def test_counts_must_be_whole_stages():
    layout = Layout(tp=8, pp=4, dp=4)  # 128 GPUs, 32 per stage
    gpus = job_gpus("h100-sxm:64,h20:64", layout)
    assert [g.name for g in gpus] == ["h100-sxm", "h100-sxm", "h20", "h20"]
    assert job_gpus([(load_gpu("h20"), 32), ("a100-80gb", 96)], layout)[1].name == "a100-80gb"
    with pytest.raises(SpecError, match="nearest valid split: h100-sxm:64,h20:64") as error:
        job_gpus("h100-sxm:60,h20:68", layout)
    assert error.value.field == "gpu"
    with pytest.raises(SpecError, match="nearest valid split: h100-sxm:96,h20:32"):
        job_gpus({"h100-sxm": 100, "h20": 40}, layout)


def test_speed_split_minimises_the_slowest_stage():
    model = load_model("megatron-1.7b")  # 24 layers
    layout = Layout(pp=4, dp=1, micro_batch=1, global_batch=4, seq_len=2048)
    gpus = job_gpus("a100-80gb:2,h100-sxm:2", layout)
    split = split_for_gpus(model, layout, gpus).pp_split
    assert sum(split) == 24 and split[0] < split[3]  # the faster H100 ranks get more

    per_layer = [_layer_seconds(model, g, layout) for g in gpus]
    extra = [sum(embedding_cost(model, gpus[0], layout)), 0.0, 0.0]
    extra.append(sum(head_cost(model, gpus[-1], layout)))

    def slowest(s):
        return max(n * c + e for n, c, e in zip(s, per_layer, extra))

    best = min(
        slowest(s)
        for s in itertools.product(range(25), range(1, 25), range(1, 25), range(25))
        if sum(s) == 24
    )
    assert slowest(split) == pytest.approx(best, rel=1e-12)


def test_same_speed_types_keep_the_usual_split():
    layout = Layout(pp=4, dp=1)
    gpus = job_gpus("h100-sxm:2,h800:2", layout)  # H800 computes as H100
    assert split_for_gpus(LLAMA8B, layout, gpus) is layout


@pytest.mark.parametrize("slow", ["a100-80gb", "h20"])
def test_two_type_job_is_between_the_one_type_jobs(h100, slow):
    layout = Layout(
        tp=8, pp=4, dp=2, micro_batch=1, global_batch=16, seq_len=4096, sequence_parallel=True
    )
    fast_only = step_time("llama3-8b", "h100-sxm", layout, h100)
    slow_only = step_time("llama3-8b", slow, layout, h100)
    for mix in (f"h100-sxm:32,{slow}:32", f"{slow}:16,h100-sxm:48"):
        mixed = step_time("llama3-8b", mix, layout, h100)
        # never faster than all on the faster type, never slower than all on the slower
        assert fast_only.step_time_s < mixed.step_time_s < slow_only.step_time_s
        assert sum(mixed.details["rank_layers"]) == 32
        assert mixed.details["gpu"] == mix
        peaks = sum(16 * load_gpu(g).peak("bf16") for g in mixed.details["rank_gpus"])
        flops = mixed.details["model_flops_per_step"]
        assert mixed.mfu == pytest.approx(flops / (mixed.step_time_s * peaks))


def test_mixed_jobs_refuse_what_they_cannot_split(h100):
    base = dict(tp=8, pp=4, dp=2, micro_batch=1, seq_len=4096)
    interleaved = Layout(vpp=2, global_batch=16, **base)
    with pytest.raises(SpecError, match="give pp_split"):
        step_time("llama3-8b", "h100-sxm:32,h20:32", interleaved, h100)
    given = dataclasses.replace(interleaved, pp_split=(10, 10, 6, 6))
    result = step_time("llama3-8b", "h100-sxm:32,h20:32", given, h100)
    assert result.details["rank_layers"] == [10, 10, 6, 6]
    with pytest.raises(SpecError, match="fp8"):
        step_time(
            "llama3-8b",
            "a100-80gb:32,h100-sxm:32",
            Layout(precision="fp8", global_batch=16, **base),
            h100,
        )


def test_job_spec_file_and_cli(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("gpus:\n  - {gpu: h100-sxm, count: 32}\n  - {gpu: h20, count: 32}\n")
    spec = load_job(str(job))
    assert [(g.name, n) for g, n in spec["gpus"]] == [("h100-sxm", 32), ("h20", 32)]
    args = [
        "step", "--fabric", "dgx-h100-superpod", "--model", "llama3-8b", "--gpus", "64",
        "--tp", "8", "--pp", "4", "--micro-batch", "1", "--global-batch", "16", "--seq", "4096",
    ]  # fmt: skip
    assert main([*args, "--job", str(job), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main([*args, "--gpu", "h100-sxm:32,h20:32", "--json"]) == 0
    from_flag = json.loads(capsys.readouterr().out)
    assert from_file["step_time_s"] == from_flag["step_time_s"]
    assert from_file["gpu"] == "h100-sxm:32,h20:32"
    assert main([*args, "--gpu", "h100-sxm", "--pp-split", "4,12,12,4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rank_layers"] == [4, 12, 12, 4]
    for extra, flag in (
        (["--gpu", "h100-sxm:30,h20:34"], "--gpu"),
        (["--gpu", "h100-sxm", "--pp-split", "4,12,x,4"], "--pp-split"),
        (["--gpu", "h100-sxm", "--pp-split", "4,12,12"], "pp_split"),
        (["--gpu", "h100-sxm", "--job", str(job)], "--job"),
        ([], "--gpu"),
    ):
        assert main([*args, *extra]) == 2
        assert flag in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  - {gpu: h100-sxm}\n")
    with pytest.raises(SpecError, match=r"job.gpus\[0\]"):
        load_job(str(bad))
