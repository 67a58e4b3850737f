"""What the routers share below :mod:`fabricflow.routing.route`: the peak-memory constants
that ``ff.route`` checks before a router runs (and the routers again once they know their
width), and the :class:`~fabricflow.errors.RoutingError` of unreachable flows.

The dispatcher (``route.py``) imports every router; the routers import this module, never
the dispatcher.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import RoutingError

# Peak bytes of routing, per flow and per candidate path entry (flows x hops of the
# paths a router builds before trimming). Measured peak RSS on 2M flows: 290-330 B per
# flow on Clos (6 hops) and dragonfly (5-7), 500 B on a 24-hop torus; multipath merging
# ~95 B per raw entry. The constants cover these with margin.
ROUTE_BYTES_PER_FLOW = 200
ROUTE_BYTES_PER_ENTRY = 64
MERGE_BYTES_PER_ENTRY = 100
GENERIC_WIDTH_GUESS = 8


def unreachable_error(src: np.ndarray, dst: np.ndarray, bad: np.ndarray, why: str) -> RoutingError:
    """A RoutingError that gives the count of unreachable flows and one example."""
    first = int(np.flatnonzero(bad)[0])
    return RoutingError(
        f"{int(bad.sum())} flow(s) unreachable {why}; e.g. flow {first}: "
        f"GPU {int(src[first])} -> GPU {int(dst[first])}"
    )
