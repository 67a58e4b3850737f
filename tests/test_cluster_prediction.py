"""Failure prediction (fabricflow.cluster.prediction): the simulated goodput and lost work
of one job against the renewal-theory expectation, with false alarms and with a lead
shorter than the checkpoint; recall 0 is reactive restart exactly; bad predictors."""

from __future__ import annotations

import math

import pytest
from cluster_jobs import SOLO, solo_run

import fabricflow as ff
from fabricflow.cluster.failures import expected_goodput
from fabricflow.cluster.prediction import Predictor, expected_goodput_with_prediction
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.errors import SpecError


def _solo(predictor, *, work_s, seed=11):
    """The solo job with ``work_s`` seconds of standalone work (a count of failures that
    does not move with the step model's step time)."""
    run = solo_run(400.0, 40.0, 120.0, 2000.0, None, seed, predictor, duration_s=work_s)
    (job,) = run.jobs
    return run, job


@pytest.mark.parametrize(
    ("recall", "precision", "lead"),
    [(0.8, 0.7, 300.0), (0.5, 1.0, 10.0)],  # false alarms; a lead shorter than the write
)
def test_simulated_goodput_and_lost_work_match_renewal_theory(recall, precision, lead):
    interval, write, restart, mtbf = 400.0, 40.0, 120.0, 2000.0
    predictor = Predictor(
        recall=recall, precision=precision, lead_s=lead, classes=("gpu",), drain_s=600.0
    )
    run, job = _solo(predictor, work_s=700_000.0)
    # hundreds of alarms; the failures that still hit the job are the unpredicted ones
    assert job["state"] == "done" and job["failures"] > 70 and job["alarms"] > 200
    expected = expected_goodput_with_prediction(
        interval, write, restart, mtbf, recall=recall, precision=precision, lead_s=lead
    )
    assert job["goodput"] == pytest.approx(expected["goodput"], rel=0.03)
    wall = job["end_s"] - job["start_s"]
    assert job["lost_work_s"] / wall == pytest.approx(expected["lost_work_per_s"], rel=0.2)
    counts = run.cluster["prediction"]
    alarms = counts["true_alarms"] + counts["false_alarms"]
    assert counts["true_alarms"] / alarms == pytest.approx(precision, abs=0.08)
    if lead < write:  # no proactive checkpoint finishes before its failure
        assert counts["failures_during_checkpoint"] > 0
    else:
        assert job["migrations"] > 0 and counts["failures_during_checkpoint"] == 0


def test_prediction_beats_reactive_restart_and_recall_zero_is_reactive():
    reactive_run, reactive = _solo(None, work_s=280_000.0)
    blind_run, blind = _solo(Predictor(recall=0.0, classes=("gpu",)), work_s=280_000.0)
    assert blind == reactive  # the same failures (drawn ahead, same streams), no alarm
    _, predicted = _solo(
        Predictor(recall=0.8, precision=1.0, lead_s=600.0, classes=("gpu",)), work_s=280_000.0
    )
    assert predicted["goodput"] > reactive["goodput"] + 0.05
    assert predicted["lost_work_s"] < 0.5 * reactive["lost_work_s"]


def test_the_formula_reduces_to_daly_and_falls_by_one_minus_recall():
    for tau, delta, restart, mtbf in (
        (400.0, 40.0, 120.0, 2000.0),
        (1800.0, 60.0, 600.0, 4 * 3600.0),
    ):
        blind = expected_goodput_with_prediction(
            tau, delta, restart, mtbf, recall=0.0, precision=0.5, lead_s=0.0
        )
        assert blind["goodput"] == pytest.approx(
            expected_goodput(tau, delta, restart, mtbf), rel=1e-12
        )
    # tau << M, a long lead: the lost work per second falls by the factor 1 - r
    base = expected_goodput_with_prediction(
        60.0, 1.0, 0.0, 1e7, recall=0.0, precision=1.0, lead_s=3600.0
    )
    for recall in (0.3, 0.8):
        got = expected_goodput_with_prediction(
            60.0, 1.0, 0.0, 1e7, recall=recall, precision=1.0, lead_s=3600.0
        )
        assert got["lost_work_per_s"] / base["lost_work_per_s"] == pytest.approx(
            1 - recall, rel=1e-3
        )
    # false alarms cost: lower precision, lower goodput
    values = [
        expected_goodput_with_prediction(
            400.0, 40.0, 120.0, 2000.0, recall=0.8, precision=p, lead_s=600.0
        )["goodput"]
        for p in (1.0, 0.5, 0.2)
    ]
    assert values[0] > values[1] > values[2]
    assert math.isfinite(values[2])


def test_bad_predictors_are_refused():
    with pytest.raises(SpecError, match="prediction.recall"):
        Predictor(recall=1.5)
    with pytest.raises(SpecError, match="prediction.precision"):
        Predictor(precision=0.0)
    with pytest.raises(SpecError, match="prediction.classes"):
        Predictor(classes=("link",))
    with pytest.raises(SpecError, match="prediction.lead_s"):
        Predictor(lead_s="-5m")
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError, match="needs failures"):
        simulate_cluster(
            fabric, [{**SOLO, "steps": 10}], prediction=Predictor(), interference=False
        )
    with pytest.raises(SpecError, match="Predictor"):
        simulate_cluster(
            fabric,
            [{**SOLO, "steps": 10}],
            failures="default",
            prediction={"recall": 0.5},
            interference=False,
        )
