"""Bad arguments to the collective model give named errors, never a silent conversion."""

from __future__ import annotations

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.collective.timing import MAX_CHANNELS, PreparedCollective, collective_time


@pytest.fixture(scope="module")
def fabric():
    return ff.load_fabric("dgx-h100-superpod")


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
