"""A hostile user's corpus: bad and edge inputs over every CLI command and the public API.

The bar for each case: a named fabricflow error whose message names the field (or an
argparse usage error, exit 2, at the command line); never a traceback, never a silently
wrong number (where a result comes back it is finite and checked against an independent
computation), never an unbounded run (each case is refused or done in seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from reference_solvers import fluid_completion, progressive_filling

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import FabricflowError, SpecError
from fabricflow.units import parse_bandwidth, parse_size, parse_time
from fabricflow.workload import Layout

PARKING_LOT = [[0, 1], [0, -1], [1, -1]]
FABRIC = "dgx-h100-superpod"


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric(FABRIC)


@pytest.fixture(scope="module")
def dumbbell():
    from fabricflow.dynamics.scenarios import dumbbell

    return dumbbell(2)


def _layout(**changes) -> Layout:
    base = dict(tp=2, dp=8, micro_batch=1, global_batch=16, seq_len=2048)
    return Layout(**{**base, **changes})


def _raises_named(call, field: str, error=FabricflowError) -> FabricflowError:
    """``call()`` raises ``error`` (a fabricflow error) whose message names ``field``."""
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, FabricflowError)
    assert field in str(caught.value), str(caught.value)
    return caught.value


# ------------------------------------------------------------- step --set / --gpu-set


STEP = [
    "step",
    "--fabric",
    FABRIC,
    "--gpu",
    "h100-sxm",
    "--model",
    "llama3-8b",
    "--gpus",
    "16",
    "--tp",
    "2",
    "--micro-batch",
    "1",
    "--global-batch",
    "16",
    "--seq",
    "2048",
    "--collectives",
    "alpha-beta",
    "--json",
]


def _cli_json(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert len(lines) == 1, captured.out
    assert "Traceback" not in captured.err
    return code, json.loads(lines[0]), captured.err


@pytest.mark.parametrize(
    ("flag", "item", "words"),
    [
        ("--gpu-set", "hbm=[1", ["--gpu-set hbm", "not valid YAML"]),
        ("--gpu-set", "hbm=.nan", ["--gpu-set hbm", "finite"]),
        ("--gpu-set", "hbm=inf", ["--gpu-set hbm", "finite"]),
        ("--gpu-set", "compute_units=" + "9" * 40, ["--gpu-set compute_units", "64-bit"]),
        ("--gpu-set", "hbm=2024-01-01", ["--gpu-set hbm", "expected a number"]),
        ("--model-set", "num_hidden_layers=&a [*a]", ["--model-set num_hidden_layers", "alias"]),
        ("--model-set", "num_hidden_layers={a: 1, a: 2}", ["--model-set", "duplicate key"]),
        ("--model-set", "num_hidden_layers=" + "[" * 100 + "]" * 100, ["--model-set", "nested"]),
        ("--model-set", "num_hidden_layers=!!python/object:os.system x", ["--model-set"]),
        ("--model-set", "num_hidden_layers=1e300", ["num_hidden_layers", "64-bit"]),
        ("--model-set", "=4", ["--model-set", "FIELD=VALUE"]),
    ],
)
def test_step_set_values_go_through_the_safe_reader(capsys, flag, item, words):
    code, out, _ = _cli_json(capsys, *STEP, flag, item)
    assert code == 2 and out["error"] == "SpecError"
    for word in words:
        assert word in out["message"]


def test_step_set_numbers_are_decimal():
    from fabricflow.commands.step import _assignments

    assert _assignments(["a=010", "b=1.5", "c=1e9", "d=96GB", "e=true"], "--gpu-set") == {
        "a": 10,  # not YAML 1.1's octal 8
        "b": 1.5,
        "c": 1e9,
        "d": "96GB",
        "e": True,
    }
    for text in ("0x10", "1_000", "0o10", "0b1"):
        error = _raises_named(lambda t=text: _assignments([f"k={t}"], "--gpu-set"), "decimal")
        assert error.field == "--gpu-set k" and text in str(error)
    assert _assignments(["k=1:30"], "--gpu-set") == {"k": "1:30"}  # not base-60 90


def test_step_set_twice_is_refused_not_last_wins(capsys):
    code, out, _ = _cli_json(capsys, *STEP, "--gpu-set", "hbm=80GB", "--gpu-set", "hbm=10GB")
    assert code == 2 and "--gpu-set hbm: given twice" in out["message"]


def test_step_set_numbers_and_quantities_still_work(capsys):
    code, out, _ = _cli_json(
        capsys, *STEP, "--gpu-set", "hbm=96GB", "--model-set", "vocab_size=1.28e5"
    )
    assert code == 0 and out["collective_backend"] == "alpha-beta"


# ---------------------------------------------------------------- step --collectives


def test_step_help_offers_the_backend_names(capsys):
    with pytest.raises(SystemExit):
        main(["step", "--help"])
    text = capsys.readouterr().out
    assert "{fabric,alpha-beta}" in text and "collective-model" not in text


def test_step_deprecated_backend_is_mapped_with_a_note(capsys):
    args = [a if a != "alpha-beta" else "auto" for a in STEP]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CLI maps the name itself: no warning raised
        code, out, err = _cli_json(capsys, *args)
    assert code == 0 and out["collective_backend"] == "fabric"
    assert "--collectives auto is deprecated; use --collectives fabric" in err


# ------------------------------------------------ max_min_completion: range and tolerances


@pytest.mark.parametrize(
    ("capacity_scale", "size_scale"),
    [(1e39, 1e39), (1e-40, 1e-40), (1e39, 1.0), (1.0, 1e39), (1e-40, 1.0), (1.0, 1e-40)],
)
def test_completion_of_any_magnitude_matches_the_float64_reference(capacity_scale, size_scale):
    capacity = np.array([1.0, 3.0]) * capacity_scale
    size = np.array([1.0, 2.0, 5.0]) * size_scale
    start = np.array([0.0, 0.5, 0.1]) * size_scale / capacity_scale
    result = ff.max_min_completion(PARKING_LOT, capacity, size, start=start)
    expected = fluid_completion(PARKING_LOT, capacity, size, start)
    assert np.all(np.isfinite(result.finish_time)) and np.all(result.finish_time > 0)
    np.testing.assert_allclose(result.finish_time, expected, rtol=1e-6)


def test_completion_keeps_float32_for_ordinary_inputs_and_huge_starts_in_float64():
    assert ff.max_min_completion(PARKING_LOT, [1e9, 2e9], [1e6] * 3).finish_time.dtype == np.float32
    late = ff.max_min_completion([[0]], [1.0], [1.0], start=[1e39]).finish_time
    assert late.dtype == np.float64 and np.isfinite(late[0])
    np.testing.assert_allclose(late, [1e39], rtol=1e-12)


@pytest.mark.parametrize("rtol", [1.0, -1e-9, float("nan"), True, "1e-6"])
def test_completion_rtol_is_checked_like_max_min_rates(rtol):
    expected = _raises_named(lambda: ff.max_min_rates([[0]], [1.0], rtol=rtol), "rtol")
    got = _raises_named(lambda: ff.max_min_completion([[0]], [1.0], [1.0], rtol=rtol), "rtol")
    assert str(got) == str(expected)


@pytest.mark.parametrize("bound", [0, -1, 2**31, 1.5, True, "10"])
def test_completion_max_events_is_checked_like_max_iters(bound):
    error = _raises_named(lambda: ff.max_min_completion([[0]], [1.0], [1.0], max_events=bound), "")
    assert error.field == "max_events" and "1..2147483647" in str(error)


def test_completion_rtol_is_used():
    loose = ff.max_min_completion(PARKING_LOT, [1.0, 1.0], [1.0, 1.0, 1.0], rtol=1e-4)
    np.testing.assert_allclose(loose.finish_time, [2.0, 2.0, 2.0], rtol=1e-5)


# ------------------------------------------------------------- parse_* (units)


@pytest.mark.parametrize(
    ("parse", "value", "field"),
    [
        (parse_bandwidth, "nan", "bandwidth"),
        (parse_bandwidth, "1e400Gbps", "bandwidth"),
        (parse_bandwidth, "-1Gbps", "bandwidth"),
        (parse_bandwidth, "400gbps", "bandwidth"),
        (parse_bandwidth, True, "bandwidth"),
        (parse_bandwidth, None, "bandwidth"),
        (parse_bandwidth, 10**400, "bandwidth"),
        (parse_time, "1 fortnight", "time"),
        (parse_time, np.float32("inf"), "time"),
        (parse_time, "-1us", "time"),
        (parse_size, "1e30B", "size"),
        (parse_size, [1], "size"),
        (parse_size, np.bool_(True), "size"),
        (parse_size, "", "size"),
    ],
)
def test_bad_quantities_name_the_field(parse, value, field):
    assert _raises_named(lambda: parse(value), field, SpecError).field == field


def test_numpy_scalars_are_quantities():
    assert parse_size(np.int64(5)) == 5.0
    assert parse_time(np.float32(0.5)) == 0.5
    assert parse_bandwidth(np.float64(1e9)) == 1e9


# ------------------------------------------------------------------- solver API

BAD_SOLVER_INPUTS = [
    ("ragged links", dict(links=[[0, 1], [0]], capacity=[1.0, 1.0]), "links"),
    ("float links", dict(links=[[0.0]], capacity=[1.0]), "links"),
    ("1-d links", dict(links=[0, 1], capacity=[1.0, 1.0]), "links"),
    ("link id too large", dict(links=[[2**40]], capacity=[1.0]), "links"),
    ("complex capacity", dict(links=PARKING_LOT, capacity=[1 + 1j, 1.0]), "capacity"),
    ("string capacity", dict(links=PARKING_LOT, capacity=["1", "2"]), "capacity"),
    ("object capacity", dict(links=PARKING_LOT, capacity=[None, 1.0]), "capacity"),
    ("NaN capacity", dict(links=PARKING_LOT, capacity=[np.nan, 1.0]), "capacity"),
    ("negative capacity", dict(links=PARKING_LOT, capacity=[-1.0, 1.0]), "capacity"),
    ("scalar capacity", dict(links=PARKING_LOT, capacity=1.0), "capacity"),
    ("3-d capacity", dict(links=PARKING_LOT, capacity=np.ones((1, 1, 2))), "capacity"),
    ("ragged capacity", dict(links=PARKING_LOT, capacity=[[1.0], [1.0, 2.0]]), "capacity"),
    ("zero weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[0, 1, 1]), "weight"),
    ("inf weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[np.inf, 1, 1]), "weight"),
    ("short weight", dict(links=PARKING_LOT, capacity=[1, 1], weight=[1, 1]), "weight"),
    ("NaN demand", dict(links=PARKING_LOT, capacity=[1, 1], demand=[np.nan, 1, 1]), "demand"),
    ("NaN coef", dict(links=PARKING_LOT, capacity=[1, 1], coef=np.full((3, 2), np.nan)), "coef"),
    ("coef shape", dict(links=PARKING_LOT, capacity=[1, 1], coef=np.ones((3, 3))), "coef"),
    ("batches", dict(links=PARKING_LOT, capacity=np.ones((2, 2)), weight=np.ones((3, 3))), "batch"),
    ("max_iters 0", dict(links=PARKING_LOT, capacity=[1, 1], max_iters=0), "max_iters"),
    ("max_iters text", dict(links=PARKING_LOT, capacity=[1, 1], max_iters="5"), "max_iters"),
    ("rtol NaN", dict(links=PARKING_LOT, capacity=[1, 1], rtol=float("nan")), "rtol"),
]


@pytest.mark.parametrize(("kwargs", "field"), [c[1:] for c in BAD_SOLVER_INPUTS],
                         ids=[c[0] for c in BAD_SOLVER_INPUTS])  # fmt: skip
def test_max_min_rates_bad_inputs(kwargs, field):
    _raises_named(lambda: ff.max_min_rates(**kwargs), field, SpecError)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(rates=[0.5, 0.5]), "rates"),
        (dict(rates=["a", "b", "c"]), "rates"),
        (dict(rates=[[0.5], [0.5, 0.5]]), "rates"),
        (dict(rates=[0.5, 0.5, 0.5], rtol=-1), "rtol"),
        (dict(rates=[0.5, 0.5, 0.5], rtol="x"), "rtol"),
        (dict(rates=[0.5, 0.5, 0.5], rtol=float("nan")), "rtol"),
        (dict(rates=[0.1, 0.1, 0.1], rtol=10.0), "rtol"),  # would certify anything
        (dict(rates=[0.5, 0.5, 0.5], capacity=np.ones((2, 2))), "capacity"),
    ],
)
def test_certify_max_min_bad_inputs(kwargs, field):
    kwargs = {"capacity": [1.0, 1.0], **kwargs}
    _raises_named(lambda: ff.certify_max_min(PARKING_LOT, **kwargs), field, SpecError)


def test_certify_max_min_judges_bad_rates_instead_of_crashing():
    assert not ff.certify_max_min(PARKING_LOT, [1.0, 1.0], [np.nan, 0.5, 0.5])
    assert not ff.certify_max_min(PARKING_LOT, [1.0, 1.0], [-0.5, 0.5, 0.5])
    assert ff.certify_max_min(PARKING_LOT, [1e39, 1e39], [5e38, 5e38, 5e38])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(size=[np.nan, 1, 1]), "size"),
        (dict(size=[np.inf, 1, 1]), "size"),
        (dict(size=[-1, 1, 1]), "size"),
        (dict(size=[1, 1]), "size"),
        (dict(size=["1", "1", "1"]), "size"),
        (dict(size=[1, 1, 1], start=[np.nan, 0, 0]), "start"),
        (dict(size=[1, 1, 1], start=[-1, 0, 0]), "start"),
        (dict(size=[1, 1, 1], start=[np.inf, 0, 0]), "start"),
        (dict(size=[1, 1, 1], mode="fast"), "mode"),
        (dict(size=[1, 1, 1], mode="batched", eps=1.0), "eps"),
        (dict(size=[1, 1, 1], mode="batched", eps=float("nan")), "eps"),
        (dict(size=[1, 1, 1], capacity=np.ones((2, 2))), "capacity"),
        (dict(size=[1, 1, 1], weight=[0, 1, 1]), "weight"),
    ],
)
def test_max_min_completion_bad_inputs(kwargs, field):
    kwargs = {"capacity": [1.0, 1.0], **kwargs}
    capacity = kwargs.pop("capacity")
    _raises_named(lambda: ff.max_min_completion(PARKING_LOT, capacity, **kwargs), field, SpecError)


def test_solver_edge_inputs_give_the_reference_answer():
    empty = ff.max_min_rates(np.zeros((0, 1), int), [1.0])
    assert empty.shape == (0,)
    np.testing.assert_array_equal(ff.max_min_rates(PARKING_LOT, [np.inf, np.inf]), [np.inf] * 3)
    uint_links = np.array(PARKING_LOT)
    uint_links[uint_links < 0] = 0
    uint_links = uint_links.astype(np.uint64)
    np.testing.assert_allclose(
        ff.max_min_rates(uint_links, [1.0, 3.0]),
        progressive_filling(uint_links.astype(np.int64), [1.0, 3.0]),
        rtol=1e-6,
    )
    zero = ff.max_min_completion(PARKING_LOT, [1.0, 1.0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(zero.finish_time, [0.0, 0.0, 0.0])
    blocked = ff.max_min_completion(PARKING_LOT, [0.0, 1.0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(blocked.finish_time, [np.inf, np.inf, 1.0])


# ---------------------------------------------------------------- routing, fabric


@pytest.mark.parametrize(
    ("src", "dst", "options", "field"),
    [
        ([1024], [0], {}, "src"),
        ([-1], [0], {}, "src"),
        ([0.5], [1], {}, "src"),
        (["a"], [1], {}, "src"),
        ([True], [False], {}, "src"),
        ([[0, 1], [2]], [1], {}, "src"),
        ([0], [[1, 2], [3]], {}, "dst"),
        ([0, 1], [2], {}, "dst"),
        ([0], [0], {}, "dst"),
        ([0], [1], {"policy": "magic"}, "policy"),
        ([0], [1], {"seed": -1}, "seed"),
        ([0], [1], {"seed": True}, "seed"),
        ([0], [1], {"seed": 2**70}, "seed"),
        ([0], [1], {"foo": 1}, "foo"),
        ([0], [1], {"policy": "multipath", "k": -1}, "k"),
    ],
)
def test_route_bad_inputs(fabric, src, dst, options, field):
    _raises_named(lambda: ff.route(fabric, src, dst, **options), field, SpecError)


@pytest.mark.parametrize("spec", ["nope", "", "/dev/null", 5, None, ["dgx-h100-superpod"]])
def test_load_fabric_bad_names(spec):
    _raises_named(lambda: ff.load_fabric(spec), "fabric", SpecError)


def test_load_fabric_bad_files(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    for path in (broken, listing, tmp_path):
        _raises_named(lambda path=path: ff.load_fabric(str(path)), "fabric", SpecError)
    _raises_named(lambda: ff.load_fabric(FABRIC, foo=1), "foo", SpecError)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": 7}, "gpus"),
        ({"gpus": 10**12}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"gpus": "1024"}, "gpus"),
        ({"gpus_per_node": 2.5}, "gpus_per_node"),
        ({"topology": {"type": "hypercube"}}, "topology.type"),
        ({"scale_up": {"domain_size": 3}}, "scale_up.domain_size"),
    ],
)
def test_load_fabric_bad_overrides(overrides, field):
    _raises_named(lambda: ff.load_fabric(FABRIC, **overrides), field, SpecError)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda f: f.with_capacity(["a"] * f.num_links), "capacity"),
        (lambda f: f.with_capacity(np.full(f.num_links, np.nan)), "capacity"),
        (lambda f: f.with_capacity([1.0]), "capacity"),
        (lambda f: f.without(link_kind="leaf", fraction=2), "fraction"),
        (lambda f: f.without(links=[10**9]), "links"),
    ],
)
def test_fabric_changes_bad_inputs(fabric, change, field):
    _raises_named(lambda: change(fabric), field, SpecError)


# ------------------------------------------------------------------ collectives


@pytest.mark.parametrize(
    ("op", "groups", "size", "options", "field"),
    [
        ("allreduce_x", [list(range(8))], 1e6, {}, "op"),
        ("all_reduce", [list(range(8))], float("nan"), {}, "size: "),
        ("all_reduce", [list(range(8))], -1.0, {}, "size: "),
        ("all_reduce", [list(range(8))], float("inf"), {}, "size: "),
        ("all_reduce", [[0, 0, 1, 2]], 1e6, {}, "groups"),
        ("all_reduce", [[0, 1024]], 1e6, {}, "groups"),
        ("all_reduce", [[0]], 1e6, {}, "groups"),
        ("all_reduce", np.zeros((0, 2), int), 1e6, {}, "groups"),
        ("all_reduce", [[0.0, 1.0]], 1e6, {}, "groups"),
        ("all_reduce", [[[0, 1]]], 1e6, {}, "groups"),
        ("all_reduce", [[0, 1], [2]], 1e6, {}, "groups"),
        ("all_reduce", [list(range(8))], 1e6, {"algorithm": "magic"}, "algorithm"),
        ("all_reduce", [list(range(8))], 1e6, {"protocol": "LL256"}, "protocol"),
        ("all_reduce", [list(range(8))], 1e6, {"routing": "x"}, "routing"),
        ("all_reduce", [list(range(8))], 1e6, {"channels": 0}, "channels"),
        ("all_reduce", [list(range(8))], 1e6, {"channels": True}, "channels"),
        ("all_reduce", [list(range(8))], 1e6, {"seed": "x"}, "seed"),
        ("all_reduce", [[0, 8]], 1e6, {"algorithm": "nvls"}, "algorithm"),
    ],
)
def test_collective_time_bad_inputs(fabric, op, groups, size, options, field):
    _raises_named(lambda: ff.collective_time(fabric, op, groups, size, **options), field)


def test_collective_time_of_absurd_sizes_is_finite_and_linear(fabric):
    group = [list(range(8))]
    big = ff.collective_time(fabric, "all_reduce", group, 1e30)
    bigger = ff.collective_time(fabric, "all_reduce", group, 2e30)
    assert np.isfinite(big.time_s) and big.time_s > 1e15
    np.testing.assert_allclose(bigger.time_s / big.time_s, 2.0, rtol=1e-9)


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


def test_route_needs_a_fabric_object():
    _raises_named(lambda: ff.route(FABRIC, [0], [1]), "fabric", SpecError)


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


# ------------------------------------------------------------------------- DCQCN


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"size": [1.0, 2.0, 3.0]}, "size"),
        ({"size": "1MB"}, "size"),
        ({"size": True}, "size"),
        ({"start": [[0.0], [0.0, 1.0]]}, "start"),
        ({"duration": "1ms"}, "duration"),
        ({"dt": "1us"}, "dt"),
        ({"extra_delay": "1us"}, "extra_delay"),
        ({"dtype": np.int32}, "dtype"),
        ({"params": "x"}, "params"),
        ({"pfc": "maybe"}, "pfc"),
        ({"records": 1}, "records"),
    ],
)
def test_simulate_dcqcn_bad_inputs(dumbbell, options, field):
    options = {"duration": 1e-4, **options}
    _raises_named(
        lambda: ff.simulate_dcqcn(dumbbell.fabric, dumbbell.routes, **options), field, SpecError
    )


@pytest.mark.parametrize("count", [True, "3", 2.5, 10**8])
def test_cc_scenario_sizes_are_checked(count):
    from fabricflow.dynamics.scenarios import dumbbell

    _raises_named(lambda: dumbbell(count), "flows", SpecError)


def test_simulate_dcqcn_refuses_routes_of_another_fabric(dumbbell, fabric):
    _raises_named(lambda: ff.simulate_dcqcn(fabric, dumbbell.routes), "routes", SpecError)
    _raises_named(lambda: ff.simulate_dcqcn(dumbbell.fabric, "x"), "routes", SpecError)


def test_feedback_delay_longer_than_the_run_is_bounded_and_changes_nothing(dumbbell):
    run = dict(duration=2e-4, dt=1e-6)
    long = ff.simulate_dcqcn(dumbbell.fabric, dumbbell.routes, extra_delay=1e3, **run)
    just_past = ff.simulate_dcqcn(dumbbell.fabric, dumbbell.routes, extra_delay=3e-4, **run)
    np.testing.assert_array_equal(long.rate, just_past.rate)


# ------------------------------------------------------------------- CLI, in-process

COLL = ["collective", "--fabric", FABRIC, "--op", "all_reduce", "--gpus", "16", "--json"]
COLL_SIZES = ["-b", "1MiB", "-e", "2MiB"]
CC = ["cc", "--scenario", "dumbbell", "--flows", "2", "--duration", "1ms", "--json"]

CLI_CASES = [
    # (id, argv, exit code, error class, words in the message)
    ("fabric unknown", ["fabric", "nope", "--json"], 2, "SpecError", ["fabric", "presets"]),
    ("fabric empty", ["fabric", "", "--json"], 2, "SpecError", ["fabric"]),
    ("fabric missing", ["fabric", "--json"], 2, "UsageError", ["fabric"]),
    ("presets extra", ["presets", "x", "--json"], 2, "UsageError", ["unrecognized"]),
    ("no command", ["--json"], 2, "UsageError", ["COMMAND"]),
    (
        "demo group 0",
        ["demo", "--fabric", FABRIC, "--group-size", "0", "--json"],
        2,
        "SpecError",
        ["group_size"],
    ),
    (
        "demo group huge",
        ["demo", "--fabric", FABRIC, "--group-size", "100000", "--json"],
        2,
        "SpecError",
        ["group_size"],
    ),
    ("demo group text", ["demo", "--group-size", "x", "--json"], 2, "UsageError", ["--group-size"]),
    ("collective op", [*COLL, "--op", "nope"], 2, "SpecError", ["op"]),
    ("collective gpus 1", [*COLL, "--gpus", "1"], 2, "SpecError", ["gpus", "2..1024"]),
    ("collective gpus huge", [*COLL, "--gpus", "99999999"], 2, "SpecError", ["gpus"]),
    ("collective gpus float", [*COLL, "--gpus", "2.5"], 2, "UsageError", ["--gpus"]),
    ("collective group 3", [*COLL, "--group-size", "3"], 2, "SpecError", ["group_size"]),
    ("collective min > max", [*COLL, "-b", "8MiB", "-e", "1MiB"], 2, "SpecError", ["maxbytes"]),
    ("collective size NaN", [*COLL, "-b", "nan"], 2, "SpecError", ["minbytes"]),
    ("collective size 0", [*COLL, "-b", "0", "-e", "0"], 2, "SpecError", ["minbytes"]),
    ("collective step 1", [*COLL, *COLL_SIZES, "-f", "1"], 2, "SpecError", ["stepfactor"]),
    ("collective step inf", [*COLL, *COLL_SIZES, "-f", "inf"], 2, "SpecError", ["--stepfactor"]),
    (
        "collective step tiny",
        [*COLL, "-b", "1", "-e", "1e24", "-f", "1.0000001"],
        2,
        "SpecError",
        ["stepfactor"],
    ),
    (
        "collective channels huge",
        [*COLL, *COLL_SIZES, "--channels", "100000000"],
        2,
        "SpecError",
        ["--channels", "1..64"],
    ),
    (
        "collective channels 0",
        [*COLL, *COLL_SIZES, "--channels", "0"],
        2,
        "SpecError",
        ["channels"],
    ),
    (
        "collective algorithm",
        [*COLL, *COLL_SIZES, "--algorithm", "x"],
        2,
        "SpecError",
        ["algorithm"],
    ),
    ("collective fail form", [*COLL, "--fail", "leaf"], 2, "SpecError", ["fail"]),
    ("collective fail 2", [*COLL, "--fail", "leaf:2"], 2, "SpecError", ["fraction"]),
    ("collective fail NaN", [*COLL, "--fail", "leaf:nan"], 2, "SpecError", ["fraction"]),
    ("collective fail kind", [*COLL, "--fail", "nope:0.1"], 2, "SpecError", ["link_kind"]),
    # beyond int64: refused by the parser (every integer option is an int64)
    (
        "collective seed huge",
        [*COLL, "--seed", str(2**70)],
        2,
        "UsageError",
        ["--seed", "too large"],
    ),
    ("step gpus 0", [*STEP, "--gpus", "0"], 2, "SpecError", ["--gpus"]),
    ("step gpus 15", [*STEP, "--gpus", "15"], 2, "SpecError", ["--dp", "divisible"]),
    ("step dp wrong", [*STEP, "--dp", "3"], 2, "SpecError", ["layout", "GPU count 16"]),
    ("step vpp -1", [*STEP, "--vpp", "-1"], 2, "SpecError", ["layout.vpp"]),
    ("step seq 0", [*STEP, "--seq", "0"], 2, "SpecError", ["layout.seq_len"]),
    (
        "step seq huge",
        [*STEP, "--seq", str(2**62)],
        2,
        "SpecError",
        ["layout.seq_len", "tokens per step"],
    ),
    ("step moe inf", [*STEP, "--moe-imbalance", "inf"], 2, "SpecError", ["layout.moe_imbalance"]),
    ("step interleaved", [*STEP, "--schedule", "interleaved"], 2, "SpecError", ["--schedule"]),
    ("step tp 2.0", [*STEP, "--tp", "2.0"], 2, "UsageError", ["--tp"]),
    (
        "step fp8 on A100",
        [*STEP, "--gpu", "a100-80gb", "--precision", "fp8"],
        2,
        "SpecError",
        ["precision"],
    ),
    (
        "step tp-overlap",
        [*STEP, "--tp-overlap", "--no-sequence-parallel"],
        2,
        "SpecError",
        ["layout.tp_overlap"],
    ),
    ("step backend", [*STEP, "--collectives", "nccl"], 2, "UsageError", ["--collectives"]),
    ("step unknown gpu field", [*STEP, "--gpu-set", "foo=1"], 2, "SpecError", ["gpu"]),
    ("cc flows 0", [*CC, "--flows", "0"], 2, "SpecError", ["--flows"]),
    ("cc flows huge", [*CC, "--flows", "100000000"], 2, "SpecError", ["flows", "limit"]),
    (
        "cc alltoall huge",
        [*CC, "--scenario", "alltoall", "--flows", "400"],
        2,
        "SpecError",
        ["flows", "limit"],
    ),
    ("cc duration 0", [*CC, "--duration", "0"], 2, "SpecError", ["--duration"]),
    ("cc duration huge", [*CC, "--duration", "1e9s"], 2, "SpecError", ["max_work"]),
    ("cc dt tiny", [*CC, "--dt", "1e-30"], 2, "SpecError", ["duration", "max_work"]),
    ("cc dt big", [*CC, "--dt", "1s"], 2, "SpecError", ["dt", "stable"]),
    ("cc set NaN", [*CC, "--set", "kmax=nan"], 2, "SpecError", ["kmax"]),
    ("cc set g 0", [*CC, "--set", "g=0"], 2, "SpecError", ["params.g"]),
    ("cc set g 1/0", [*CC, "--set", "g=1/0"], 2, "SpecError", ["params.g"]),
    ("cc preset", [*CC, "--params", "x"], 2, "SpecError", ["params"]),
    ("cc bandwidth 0", [*CC, "--link-bandwidth", "0"], 2, "SpecError", ["--link-bandwidth"]),
    ("cc size -1", [*CC, "--size", "-1"], 2, "SpecError", ["--size"]),
    ("cc delay -1us", [*CC, "--delay", "-1us"], 2, "SpecError", ["--delay"]),
    ("cc max-work NaN", [*CC, "--max-work", "nan"], 2, "SpecError", ["max_work"]),
    ("cc ring 1", [*CC, "--scenario", "ring", "--flows", "1"], 2, "SpecError", ["flows"]),
    ("bench flag", ["bench", "--quick", "--x", "--json"], 2, "UsageError", ["--x"]),
]


@pytest.mark.parametrize(("argv", "code", "error", "words"), [c[1:] for c in CLI_CASES],
                         ids=[c[0] for c in CLI_CASES])  # fmt: skip
def test_cli_bad_input(capsys, argv, code, error, words):
    got, out, _ = _cli_json(capsys, *argv)
    assert (got, out["error"]) == (code, error), out
    for word in words:
        assert word in out["message"], out["message"]


def test_cc_feedback_delay_far_beyond_the_run_finishes(capsys):
    code, out, _ = _cli_json(capsys, *CC, "--delay", "100s", "--duration", "0.2ms")
    assert code == 0 and out["delay_s"] == 100.0


# ------------------------------------------------------------------ CLI, subprocess


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*STEP, "--model-set", "num_hidden_layers=&a [*a]"], ["--model-set", "alias"]),
        ([*CC, "--flows", "100000000"], ["flows", "limit"]),
    ],
)
def test_cli_bad_input_in_a_real_process(argv, words):
    proc = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *[a for a in argv if a != "--json"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr


def test_alltoall_traffic_is_checked_against_the_memory_budget(monkeypatch):
    from fabricflow.errors import MemoryBudgetError
    from fabricflow.traffic.patterns import alltoall_groups

    monkeypatch.setenv("FABRICFLOW_MEMORY_BUDGET", str(2**20))
    _raises_named(lambda: alltoall_groups(1024, 1024), "1,047,552 flows", MemoryBudgetError)
    src, dst = alltoall_groups(16, 4)  # small ones still fit
    assert src.shape == dst.shape == (48,) and not (src == dst).any()


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
