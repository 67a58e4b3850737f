"""The class-level model: hash collisions as balls into bins, and a search that ranks with
it finds the brute-force winner on small spaces while saying it is not exhaustive."""

from __future__ import annotations

import numpy as np
import pytest
from optimize_cases import GPU, SEQ, SPACE, small_brute_force, small_model, tiny_oversubscribed

import fabricflow as ff
from fabricflow.layout_search.class_model import ClassModel, collision_factor
from fabricflow.layout_search.optimize import optimize_layout


def test_collision_factor_is_balls_into_bins():
    assert collision_factor(1, 16) == pytest.approx(16.0)  # one flow uses one of 16 links
    assert collision_factor(0, 16) == 1.0 and collision_factor(100, 1) == 1.0
    factors = [collision_factor(f, 16) for f in (1, 4, 16, 64, 256, 4096)]
    assert all(a > b for a, b in zip(factors, factors[1:], strict=False))  # more flows: even
    assert 1.0 < factors[-1] < 1.15  # ~ 1 + sqrt(2 ln K / lambda)
    # exact for two flows on two links: they collide half the time, E[max] = 1.5
    assert collision_factor(2, 2) == pytest.approx(1.5, rel=0.03)


def test_class_estimate_sees_oversubscription_and_collisions():
    """Groups that cross the 3:1 leaves are estimated slower than groups inside them, and
    hashing a few flows onto the uplinks costs more than spreading them."""
    fabric = tiny_oversubscribed()
    model = ClassModel(fabric)
    size = 64e6
    inside = np.arange(32).reshape(8, 4)  # one 4-GPU domain each
    across = np.arange(32).reshape(4, 8).T[:4]  # members in 8 different domains
    t_inside = model.seconds(inside, "all_reduce", size)
    t_across = model.seconds(across, "all_reduce", size)
    assert t_across > 2 * t_inside
    alone = ff.collective_time(fabric, "all_reduce", across, size).time_s
    assert 0.5 * alone < t_across < 2.0 * alone  # an estimate of the full solve


def test_class_ranking_finds_the_brute_force_winner():
    """The ranked search sets candidates aside on the estimate alone, says so, and still
    returns the brute-force winner (timed with the full model)."""
    model, fabric = small_model(), tiny_oversubscribed()
    search = optimize_layout(
        model, GPU, fabric, gpus=32, global_batch=64, seq_len=SEQ, space=SPACE, top_k=1,
        ranking="class",
    )  # fmt: skip
    expected = small_brute_force()
    assert search.best.step_time_s == pytest.approx(expected[0][1], rel=1e-12)
    c = search.counts
    assert c["ranked_by_class_model"] > 0  # the estimate did set candidates aside
    assert not search.exhaustive
    assert (
        c["evaluated"] + c["pruned"] + c["infeasible"] + c["ranked_by_class_model"]
        == (c["considered"])
    )
    again = ff.step_time(model, GPU, fabric=fabric, **search.best_kwargs)
    assert again.step_time_s == search.best.step_time_s


def test_unknown_ranking_is_refused():
    from fabricflow.errors import SpecError

    with pytest.raises(SpecError, match="ranking"):
        optimize_layout(
            small_model(), GPU, tiny_oversubscribed(), gpus=8, global_batch=16, seq_len=SEQ,
            space={"tp": [1, 2]}, ranking="guess",
        )  # fmt: skip
