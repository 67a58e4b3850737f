"""Collective algorithms -> phases of transfers. One algorithm family per module.

The registry maps an algorithm name to its builder ``(Context) -> list[Phase]`` (which
raises :class:`NotApplicable` when it cannot run), the ops it implements, the latency
family of its launch cost, and whether it runs the Simple protocol only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fabricflow.collective.algorithms.context import Context, NotApplicable
from fabricflow.collective.algorithms.halving_doubling import halving_doubling
from fabricflow.collective.algorithms.hierarchical import hierarchical
from fabricflow.collective.algorithms.in_network import nvls, sharp
from fabricflow.collective.algorithms.p2p import (
    direct_all_to_all,
    hierarchical_all_to_all,
    sendrecv,
)
from fabricflow.collective.algorithms.ring import ring
from fabricflow.collective.algorithms.tree import tree
from fabricflow.collective.phase import Phase
from fabricflow.errors import SpecError


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: ``builders`` maps op -> builder."""

    name: str
    builders: dict
    family: str
    simple_only: bool = False
    per_pair_channels: bool = False  # default one channel per pair (p2p), else per rail

    def build(self, ctx: Context) -> list[Phase]:
        builder: Callable | None = self.builders.get(ctx.op)
        if builder is None:
            raise NotApplicable(
                f"{self.name} does not implement {ctx.op}; it implements {sorted(self.builders)}"
            )
        return builder(ctx)


_COLL = ("all_reduce", "reduce_scatter", "all_gather")

ALGORITHMS = {
    "ring": Algorithm("ring", {op: ring for op in (*_COLL, "broadcast")}, "ring"),
    "tree": Algorithm("tree", {"all_reduce": tree}, "tree"),
    "halving_doubling": Algorithm(
        "halving_doubling", dict.fromkeys(_COLL, halving_doubling), "p2p"
    ),
    "hierarchical": Algorithm(
        "hierarchical",
        {**dict.fromkeys(_COLL, hierarchical), "all_to_all": hierarchical_all_to_all},
        "ring",
    ),
    "nvls": Algorithm("nvls", dict.fromkeys(_COLL, nvls), "nvls", simple_only=True),
    "sharp": Algorithm("sharp", {"all_reduce": sharp}, "tree", simple_only=True),
    "direct": Algorithm(
        "direct",
        {"all_to_all": direct_all_to_all, "sendrecv": sendrecv},
        "p2p",
        per_pair_channels=True,
    ),
}


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm called ``name`` (one spelling each, the keys of
    :data:`ALGORITHMS`); SpecError listing them (with the closest) otherwise."""
    if not isinstance(name, str) or name not in ALGORITHMS:
        allowed = ["auto", *ALGORITHMS]
        raise SpecError(
            "algorithm",
            f"unknown algorithm {name!r}; one of {allowed}",
            value=name,
            allowed=allowed,
        )
    return ALGORITHMS[name]


def algorithms_for(op: str) -> list[str]:
    """Names of the algorithms that implement ``op`` (canonical op name)."""
    return [name for name, algorithm in ALGORITHMS.items() if op in algorithm.builders]


__all__ = ["ALGORITHMS", "Algorithm", "Context", "NotApplicable", "algorithms_for", "get_algorithm"]
