"""HBM as the device reports it, host links, and offload of weights / optimizer / activations."""

import dataclasses
import itertools
import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.gpu_memory import (
    GIB,
    layer_activation_bytes,
    memory_per_gpu,
    offload_traffic,
)
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.step import BREAKDOWN_KEYS, step_time
from tests.cli_args import STEP

MIB = 2.0**20
# Llama 3 70B on 64 H100, TP 2 PP 4, full recompute: ~74.3 GiB per GPU, which fits the
# usable HBM of an "80GB" H100 (79.6 GiB as nvidia-smi reports it, 75.3 GiB less the
# headroom) but not in 80e9 bytes (74.5 GiB, 70.3 GiB usable).
BIG = dict(
    tp=2,
    pp=4,
    dp=8,
    micro_batch=4,
    global_batch=256,
    seq_len=3584,
    recompute="full",
    sequence_parallel=True,
    grad_reduce_dtype="fp32",  # fp32 main gradients and logits: the 74 GiB layout
    fused_cross_entropy=False,
)
# Llama 3 8B on 8 H100, no TP/PP/CP: a micro-batch is pure compute, no exposed comm inside.
SMALL = dict(dp=8, micro_batch=1, global_batch=32, seq_len=4096)
OFFLOADS = ("offload_optimizer", "offload_weights", "offload_activations")


@pytest.fixture(scope="module")
def h100():
    return ff.load_fabric("dgx-h100-superpod")


def test_presets_give_hbm_as_the_device_reports_it():
    assert load_gpu("h100-sxm").hbm == 81559 * MIB
    assert load_gpu("h800").hbm == 81559 * MIB
    assert load_gpu("a100-80gb").hbm == 81920 * MIB == 80 * GIB
    assert load_gpu("h200").hbm == 143771 * MIB
    assert load_gpu("b200").hbm == 183359 * MIB
    # what the user writes is read as written: "80GB" is SI, 80e9 bytes
    assert load_gpu("h100-sxm", hbm="80GB").hbm == 80e9
    # the reported capacity is more than the datasheet figure read as SI, never less
    for name, datasheet in (("h100-sxm", 80e9), ("h200", 141e9), ("b200", 180e9)):
        assert datasheet < load_gpu(name).hbm < datasheet * 1.1


def test_a_74_gib_layout_fits_an_80gb_h100(h100):
    layout = Layout(**BIG)
    need = memory_per_gpu(load_model("llama3-70b"), layout).total / GIB
    assert 73.5 < need < 75.0
    result = step_time("llama3-70b", "h100-sxm", layout, h100)
    assert result.memory_gib_per_gpu == pytest.approx(need)
    # the same layout in 80e9 bytes (74.5 GiB) is refused, naming the layout
    with pytest.raises(SpecError, match="GiB") as error:
        step_time("llama3-70b", load_gpu("h100-sxm", hbm="80GB"), layout, h100)
    assert error.value.field == "layout"


def test_host_link_presets_and_overrides():
    assert load_gpu("h100-sxm").host_link == "pcie5"
    assert load_gpu("h100-sxm").host_link_bandwidth == 50e9
    assert load_gpu("a100-80gb").host_link_bandwidth == 25e9
    assert load_gpu("gb200").host_link == "nvlink-c2c"
    assert load_gpu("gb200").host_link_bandwidth == 450e9
    assert load_gpu("tpu-v4").host_link_bandwidth is None
    gpu = load_gpu("h100-sxm", host_link="cxl", host_link_bandwidth="64GB/s")
    assert (gpu.host_link, gpu.host_link_bandwidth) == ("cxl", 64e9)
    assert load_gpu(gpu).host_link_bandwidth == 64e9  # a GpuSpec round-trips
    for overrides, field in (
        ({"host_link": "nvme"}, "gpu.host_link"),
        ({"host_link": 5}, "gpu.host_link"),
        ({"host_link_bandwidth": -1}, "gpu.host_link_bandwidth"),
        ({"host_link_bandwidth": "fast"}, "gpu.host_link_bandwidth"),
        ({"host_link_bandwidth": 0}, "gpu.host_link_bandwidth"),
    ):
        with pytest.raises(SpecError) as error:
            load_gpu("h100-sxm", **overrides)
        assert error.value.field == field


@pytest.mark.parametrize("field", OFFLOADS)
@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), float("inf"), True, "0.5", None])
def test_bad_offload_fractions_are_refused_naming_the_field(field, value):
    with pytest.raises(SpecError, match=r"\[0, 1\]") as error:
        Layout(**{field: value}).validate()
    assert error.value.field == f"layout.{field}"


@pytest.mark.parametrize(
    "name, layout",
    [
        ("llama3-70b", BIG),
        ("llama3-8b", SMALL),
        ("llama3-8b", dict(SMALL, recompute="selective", zero=3)),
        ("mixtral-8x7b", dict(tp=2, pp=2, dp=4, ep=4, micro_batch=1, global_batch=16)),
        ("llama3-70b", dict(BIG, vpp=2, recompute="none", micro_batch=1)),
    ],
)
def test_offloading_never_increases_hbm(name, layout):
    model = load_model(name)
    base = memory_per_gpu(model, Layout(**layout))
    assert base.offloaded == 0.0
    steps = (0.0, 0.25, 1.0)
    previous = {}
    for fractions in itertools.product(steps, repeat=3):
        mem = memory_per_gpu(model, Layout(**layout, **dict(zip(OFFLOADS, fractions))))
        for part in ("weights", "gradients", "optimizer", "activations", "total"):
            assert getattr(mem, part) <= getattr(base, part) * (1 + 1e-12), (fractions, part)
        assert mem.gradients == base.gradients  # gradients are never offloaded
        if mem.rank == base.rank:  # (offload can move the peak to the other end rank)
            # what leaves HBM is at most what went to host memory
            assert base.total - mem.total <= mem.offloaded * (1 + 1e-12)
        previous[fractions] = mem.total
    # more offloaded, less HBM (each fraction on its own)
    for i in range(3):
        line = [previous[tuple(s if j == i else 0.0 for j in range(3))] for s in steps]
        assert line[0] >= line[1] >= line[2]
    full = previous[(1.0, 1.0, 1.0)]
    assert full < base.total


def test_zero_offload_is_todays_model_exactly(h100):
    layout = Layout(**BIG)
    explicit = Layout(**BIG, offload_optimizer=0.0, offload_weights=0.0, offload_activations=0.0)
    assert explicit == layout
    result = step_time("llama3-70b", "h100-sxm", explicit, h100)
    assert set(result.breakdown) == set(BREAKDOWN_KEYS)
    assert result.breakdown["offload"] == 0.0
    assert result.memory.offloaded == 0.0
    # a GPU without a known host link runs as before when nothing is offloaded
    no_link = load_gpu("h100-sxm", host_link=None, host_link_bandwidth=None)
    same = step_time("llama3-70b", no_link, explicit, h100)
    assert same.step_time_s == result.step_time_s
    assert same.breakdown == result.breakdown
    with pytest.raises(SpecError) as error:
        step_time("llama3-70b", no_link, dataclasses.replace(layout, offload_weights=0.5), h100)
    assert error.value.field == "gpu.host_link_bandwidth"


@pytest.mark.parametrize("field", OFFLOADS)
def test_an_infinitely_fast_host_link_costs_nothing(h100, field):
    layout = Layout(**BIG, **{field: 1.0})
    base = step_time("llama3-70b", "h100-sxm", Layout(**BIG), h100)
    fast = step_time("llama3-70b", load_gpu("h100-sxm", host_link_bandwidth=1e15), layout, h100)
    assert fast.memory.total < base.memory.total
    assert 0.0 <= fast.breakdown["offload"] < 1e-5 * base.step_time_s
    assert fast.step_time_s == pytest.approx(base.step_time_s, rel=1e-5)
    for key in set(BREAKDOWN_KEYS) - {"offload"}:
        assert fast.breakdown[key] == base.breakdown[key]


def test_a_slow_link_exposes_the_transfer_beyond_the_overlap(h100):
    model = load_model("llama3-8b")
    base = step_time(model, "h100-sxm", Layout(**SMALL), h100)
    m = base.details["num_micro_batches"]
    micro_batch_s = base.details["micro_batch_s"]["only"]  # compute only: no TP/PP/CP
    layers = model.num_layers
    activations = layers * layer_activation_bytes(model, Layout(**SMALL), moe=False)

    # activations: out in forward, back in backward; hidden only behind the micro-batch
    slow = load_gpu("h100-sxm", host_link_bandwidth="1GB/s")
    act = step_time(model, slow, Layout(**SMALL, offload_activations=1.0), h100)
    expected = m * (2 * activations / 1e9 - micro_batch_s)
    assert act.breakdown["offload"] == pytest.approx(expected, rel=1e-9)
    assert act.step_time_s == pytest.approx(base.step_time_s + expected, rel=1e-9)

    # optimizer state: streamed in and out during the optimizer step, behind the Adam pass
    state = memory_per_gpu(model, Layout(**SMALL)).optimizer
    opt = step_time(model, slow, Layout(**SMALL, offload_optimizer=0.5), h100)
    expected = 0.5 * state / 1e9 - base.breakdown["optimizer"]
    assert opt.breakdown["offload"] == pytest.approx(expected, rel=1e-9)

    # on PCIe 5 part of the activation traffic hides behind compute: less than the transfer,
    # more than nothing, and the faster the link the less is exposed
    pcie = step_time(model, "h100-sxm", Layout(**SMALL, offload_activations=1.0), h100)
    raw = m * 2 * activations / 50e9
    assert 0.0 <= pcie.breakdown["offload"] < raw
    times = [
        step_time(
            model,
            load_gpu("h100-sxm", host_link_bandwidth=bw),
            Layout(**SMALL, offload_weights=1.0, offload_activations=1.0),
            h100,
        ).breakdown["offload"]
        for bw in (2e9, 8e9, 32e9, 128e9)
    ]
    assert times == sorted(times, reverse=True) and times[0] > times[-1] > 0


def test_weights_are_fetched_every_pass(h100):
    model = load_model("llama3-8b")
    slow = load_gpu("h100-sxm", host_link_bandwidth="0.5GB/s")
    # under full recompute the weights are needed three times per micro-batch, not twice
    runs = {}
    for recompute in ("none", "full"):
        layout = Layout(**SMALL, recompute=recompute, offload_weights=1.0)
        (traffic,) = offload_traffic(model, layout)
        runs[recompute] = step_time(model, slow, layout, h100).breakdown["offload"]
        assert traffic.weights == memory_per_gpu(model, Layout(**SMALL)).weights
    ratio = runs["full"] / runs["none"]
    assert 1.3 < ratio < 1.6  # (3 fetches - compute) / (2 fetches - compute), compute small


def test_cli_offload_flags_and_host_link_override(capsys):
    def run(*extra):
        code = main([*STEP, "--json", *extra])
        return code, json.loads(capsys.readouterr().out)

    code, base = run()
    assert code == 0 and base["breakdown"]["offload"] == 0.0
    assert base["memory_gib"]["offloaded"] == 0.0
    code, off = run("--offload-optimizer", "1", "--offload-activations", "0.5")
    assert code == 0
    assert off["layout"]["offload_optimizer"] == 1.0
    assert off["memory_gib"]["offloaded"] > 0
    assert off["memory_gib_per_gpu"] < base["memory_gib_per_gpu"]
    code, slow = run(
        "--offload-optimizer", "1", "--offload-activations", "0.5",
        "--gpu-set", "host_link_bandwidth=1GB/s",
    )  # fmt: skip
    assert code == 0 and slow["breakdown"]["offload"] > off["breakdown"]["offload"]
    code, bad = run("--offload-weights", "2")
    assert code == 2 and "layout.offload_weights" in bad["message"]
    code, bad = run("--gpu-set", "host_link=nvme")
    assert code == 2 and "gpu.host_link" in bad["message"]


def test_text_output_and_plot_show_offload(capsys, tmp_path):
    assert main([*STEP, "--offload-optimizer", "1", "--plot", str(tmp_path / "b.png")]) == 0
    out = capsys.readouterr().out
    assert "offload" in out and "host memory" in out
    assert (tmp_path / "b.png").stat().st_size > 0
