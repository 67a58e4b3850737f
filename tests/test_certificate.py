"""The bottleneck certificate on random instances (hypothesis) and on broken allocations."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fabricflow as ff

NUM_FLOWS, NUM_LINKS, NUM_HOPS = 48, 12, 4  # fixed shapes: one compilation per option set


@st.composite
def instances(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    links = rng.integers(-1, NUM_LINKS, (NUM_FLOWS, NUM_HOPS)).astype(np.int32)
    capacity = rng.uniform(0.5, 20, NUM_LINKS) * (rng.random(NUM_LINKS) > 0.1)  # some failed
    kwargs = {}
    if draw(st.booleans()):
        kwargs["weight"] = rng.uniform(0.2, 5, NUM_FLOWS)
    if draw(st.booleans()):
        kwargs["demand"] = np.where(
            rng.random(NUM_FLOWS) < 0.3, rng.uniform(0, 3, NUM_FLOWS), np.inf
        )
    if draw(st.booleans()):
        kwargs["coef"] = rng.choice([0.0, 0.25, 0.5, 1.0], (NUM_FLOWS, NUM_HOPS))
    return links, capacity, kwargs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_solver_output_is_certified_max_min(instance):
    links, capacity, kwargs = instance
    rates = ff.max_min_rates(links, capacity, **kwargs)
    certificate = ff.certify_max_min(links, capacity, rates, **kwargs)
    assert certificate.feasible, certificate.max_overload
    assert certificate.certified.all(), np.flatnonzero(~certificate.certified)
    assert certificate


def test_certificate_rejects_unfair_and_infeasible_allocations():
    links, capacity = [[0, 1], [0, -1], [1, -1]], [1.0, 1.0]
    assert ff.certify_max_min(links, capacity, [0.5, 0.5, 0.5])
    unfair = ff.certify_max_min(links, capacity, [0.4, 0.5, 0.5])  # feasible, not max-min
    assert unfair.feasible and not unfair.max_min
    assert not unfair.certified[0]
    overloaded = ff.certify_max_min(links, capacity, [0.6, 0.5, 0.5])
    assert not overloaded.feasible and overloaded.max_overload > 0.09
    over_demand = ff.certify_max_min([[0]], [2.0], [2.0], demand=[1.0])
    assert not over_demand.feasible


def test_certificate_bottlenecks_match_solver():
    links, capacity = [[0, 1], [0, -1], [1, -1]], [1.0, 4.0]
    solution = ff.max_min_solution(links, capacity)
    certificate = ff.certify_max_min(links, capacity, solution.rates)
    assert certificate.bottleneck.tolist() == solution.bottleneck.tolist() == [0, 0, 1]
