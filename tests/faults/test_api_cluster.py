"""Bad inputs to the cluster simulator (``simulate_cluster``, synthetic traces, slowdown
CDFs)."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"size_exponent": float("nan")}, "size_exponent"),  # was numpy's ValueError
        ({"size_exponent": -1.0}, "size_exponent"),
        ({"seed": -1}, "seed"),  # was numpy's ValueError
        ({"seed": 1.5}, "seed"),  # was numpy's TypeError
        ({"mean_interarrival_s": float("inf")}, "mean_interarrival_s"),  # NaN arrivals
        ({"high_priority_fraction": "half"}, "high_priority_fraction"),  # was a TypeError
    ],
)
def test_synthetic_trace_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(SpecError, match=f"^{field}: "):
        ff.synthetic_trace(3, **kwargs)


def test_simulate_cluster_refuses_truthy_strings_clamps_and_negative_seeds():
    # interference="no" ran the interference model; timeline_points=0 was clamped to 2;
    # seed=-1 reached numpy's SeedSequence only when failures were on.
    fabric = ff.load_fabric("dgx-h100-superpod")
    trace = ff.synthetic_trace(2, seed=1, fabric=fabric)
    for kwargs, field in [
        ({"interference": "no"}, "interference"),
        ({"timeline_points": 0}, "timeline_points"),
        ({"seed": -1, "failures": {"gpu": "1h"}}, "seed"),
    ]:
        with pytest.raises(SpecError, match=f"^{field}: "):
            ff.simulate_cluster(fabric, trace, **kwargs)
    run = ff.simulate_cluster(fabric, trace, interference=False, timeline_points=2)
    assert run.timeline.sizes["time"] <= 2


def test_slowdown_cdf_of_a_run_where_no_job_ran_warns_nothing(tmp_path):
    # `fabricflow cluster --horizon` before the first start printed matplotlib's
    # "No artists with labels found to put in legend" warning on stderr.
    import types
    import warnings

    from fabricflow.plots.cluster import plot_slowdown_cdf

    run = types.SimpleNamespace(jobs=[{"slowdown": None}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_slowdown_cdf({"topology": run}, tmp_path / "cdf.png")
    assert (tmp_path / "cdf.png").stat().st_size > 0
