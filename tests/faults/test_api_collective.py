"""Bad inputs to the collective model (``collective_time``, ``PreparedCollective``, all-to-all
groups): a named error, never a silent conversion."""

from __future__ import annotations

import numpy as np
import pytest
from fault_helpers import raises_named as _raises_named

import fabricflow as ff
from fabricflow.collective.timing import MAX_CHANNELS, PreparedCollective, collective_time
from fabricflow.errors import SpecError


def test_collective_refuses_a_string_rail_aware():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError) as info:
        ff.collective_time(fabric, "all_reduce", np.arange(16), 2**20, rail_aware="no")
    assert info.value.field == "rail_aware"


def test_alltoall_groups_on_one_gpu_names_the_gpu_count():
    from fabricflow.traffic.patterns import alltoall_groups

    with pytest.raises(SpecError, match=r"^num_gpus: groups need at least 2 GPUs, got 1$"):
        alltoall_groups(1, 2)


@pytest.mark.parametrize("size", [True, "1GB", [1, 2], None, np.bool_(True)])
def test_size_must_be_one_number_of_bytes(fabric, size):
    # True used to be timed as 1 byte, a list got a misleading 'must be finite' message.
    with pytest.raises(ff.SpecError, match="^size: "):
        collective_time(fabric, "all_reduce", np.arange(8), size)


@pytest.mark.parametrize("channels", [2.5, "4", 0, MAX_CHANNELS + 1, 10**9, True])
def test_channels_must_be_an_integer_in_range(fabric, channels):
    # 2.5 used to be truncated to 2; 10**9 ran 18 s into a raw MemoryError.
    with pytest.raises(ff.SpecError, match="channels"):
        collective_time(fabric, "all_reduce", np.arange(8), 2**20, channels=channels)


def test_fabric_must_be_a_fabric_not_its_name():
    with pytest.raises(ff.SpecError, match="load_fabric"):
        collective_time("dgx-h100-superpod", "all_reduce", np.arange(8), 2**20)


def test_evaluate_refuses_text_and_booleans(fabric):
    prepared = PreparedCollective(fabric, "all_reduce", np.arange(8))
    for sizes in (["1GB"], [True, 2**20]):
        with pytest.raises(ff.SpecError, match="^size: "):
            prepared.evaluate(sizes)
    # numpy integers and floats are sizes like any other number
    ints, floats = prepared.evaluate(np.array([2**20], np.int64)), prepared.evaluate([2.0**20])
    assert ints[0].time_s == floats[0].time_s > 0


def test_integral_channels_of_any_integer_type_are_accepted(fabric):
    a = collective_time(fabric, "all_reduce", np.arange(8), 2**24, algorithm="ring", channels=4)
    b = collective_time(
        fabric, "all_reduce", np.arange(8), 2**24, algorithm="ring", channels=np.int64(4)
    )
    assert a.time_s == b.time_s


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
