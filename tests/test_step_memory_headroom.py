"""step_time refuses what the layout optimizer refuses: an estimate above the usable HBM."""

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError
from fabricflow.workload.gpu_memory import GIB, usable_hbm
from fabricflow.workload.layout import Layout

LAYOUT = Layout(dp=8, micro_batch=1, global_batch=8, seq_len=4096)


def test_an_estimate_inside_the_headroom_is_refused_and_one_below_it_runs():
    fabric = ff.load_fabric("dgx-h100-superpod")
    free = ff.step_time("llama3-8b", "h100-sxm", LAYOUT, fabric, check_memory=False)
    need = free.memory_gib_per_gpu * GIB
    # a device 1 GiB larger than the estimate: it fits the device, not its usable part
    tight = ff.load_gpu("h100-sxm", hbm=need + GIB)
    assert usable_hbm(tight) < need < tight.hbm
    with pytest.raises(SpecError, match="usable"):
        ff.step_time("llama3-8b", tight, LAYOUT, fabric)
    roomy = ff.load_gpu("h100-sxm", hbm=(need + 2.5 * GIB) / 0.97)
    result = ff.step_time("llama3-8b", roomy, LAYOUT, fabric)
    assert result.details["memory"]["margin_gib"] == pytest.approx(0.5, abs=0.01)
