"""Vectorized minimal routing on torus / mesh fabrics (see :mod:`fabricflow.fabric.torus`).

A flow moves along one dimension at a time; along a ring it takes the shorter way round
(``min(delta, k - delta)`` hops), along a mesh line the only way. When both ways round a
ring are equally short (``delta == k / 2``) a seeded hash of the flow picks the direction,
which spreads such flows evenly over both directions. Every route is therefore a
minimal-hop path; rows are at most ``sum(k // 2)`` links long (``k - 1`` on mesh lines).

Policies:
    dor: dimension-order routing, x then y then z (the TPU/Blue Gene default).
    ecmp: minimal paths with a seeded random dimension order per flow (one of the
        ``D!`` orders, by hash): spreads load over more minimal paths than DOR while
        keeping each flow on a single path.

Failures (``fabric.without``): a flow whose path crosses a failed link tries the other
dimension orders (starting after its own); flows that still have no working minimal path
of this form take the shortest working path found by the generic router
(:mod:`fabricflow.routing.generic`), which may be longer than minimal. Flows with no
working path at all raise :class:`RoutingError` with the count and an example.
"""

from __future__ import annotations

import itertools

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.torus import TorusStructure
from fabricflow.routing import hashing
from fabricflow.routing.links_up import redraw_then_detour
from fabricflow.routing.route_limits import ROUTE_BYTES_PER_ENTRY
from fabricflow.routing.routes import Routes

POLICIES = ("dor", "ecmp")
_TIE_SALT = 101
_ORDER_SALT = 211


def route_width(st: TorusStructure, policy: str, options: dict) -> tuple[int, int]:
    """(route entries per flow, peak bytes per entry): the longest minimal path."""
    return max(int(st.max_hops), 1), ROUTE_BYTES_PER_ENTRY


def route_torus(
    fabric, src: np.ndarray, dst: np.ndarray, *, policy: str = "ecmp", seed: int = 0
) -> Routes:
    """Route GPU pairs on a torus; see the module docstring for the policies."""
    if policy not in POLICIES:
        raise SpecError(
            "policy",
            f"unknown policy {policy!r} for a torus fabric; one of {list(POLICIES)}",
            value=policy,
            allowed=POLICIES,
        )
    st: TorusStructure = fabric.structure
    key = hashing.flow_key(src, dst, seed)
    ndims = st.dims.size
    orders = np.asarray(list(itertools.permutations(range(ndims))), np.int64)  # [D!, D]
    if policy == "dor":
        choice = np.zeros(src.shape[0], np.int64)
    else:
        choice = hashing.choose(key, _ORDER_SALT, orders.shape[0])
    s_node, t_node = fabric.gpu_node[src], fabric.gpu_node[dst]
    hops, minus = _hops_and_directions(st, s_node, t_node, key)
    links = _walk(fabric, st, s_node, hops, minus, orders[choice])

    def other_order(pending: np.ndarray, shift: int) -> np.ndarray:
        # Other dimension orders, in a fixed rotation after the flow's own choice.
        order = orders[(choice[pending] + shift) % orders.shape[0]]
        return _walk(fabric, st, s_node[pending], hops[pending], minus[pending], order)

    links = redraw_then_detour(
        fabric,
        links,
        src,
        dst,
        key,
        attempts=orders.shape[0],
        redraw=other_order,
        min_width=1,
        why="on this torus: failures cut every working path",
    )
    return Routes(links, None, src, dst, fabric.num_links, policy)


def _hops_and_directions(st: TorusStructure, s, t, key) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``[F, D]`` hops along each dimension and bool ``[F, D]`` (True = ``-`` way)."""
    cs, ct = st.coords[s], st.coords[t]
    forward = (ct - cs) % st.dims  # hops the + way round a ring
    backward = (cs - ct) % st.dims
    tie_minus = np.stack(
        [hashing.choose(key, _TIE_SALT + d, 2) == 1 for d in range(st.dims.size)], axis=1
    )
    ring_minus = (backward < forward) | ((backward == forward) & tie_minus)
    line_minus = ct < cs
    minus = np.where(st.ring[None, :], ring_minus, line_minus)
    hops = np.where(st.ring[None, :], np.minimum(forward, backward), np.abs(ct - cs))
    return hops, minus


def _walk(fabric, st: TorusStructure, start, hops, minus, order) -> np.ndarray:
    """Links int64 ``[F, max_hops]`` of the walk that does ``hops`` along each dimension in
    ``order`` (int64 ``[F, D]``, per flow), padding at the end of each row."""
    num = start.shape[0]
    links = np.full((num, max(st.max_hops, 1)), -1, np.int64)
    rows = np.arange(num)
    column = np.zeros(num, np.int64)
    cur = start.astype(np.int64).copy()
    longest = int(hops.max(initial=0))
    for position in range(st.dims.size):
        dim = order[:, position]
        count = hops[rows, dim]
        direction = minus[rows, dim].astype(np.int64)
        for step in range(longest):
            active = np.flatnonzero(step < count)
            if active.size == 0:
                break
            link = st.step_link[dim[active], direction[active], cur[active]]
            links[active, column[active]] = link
            column[active] += 1
            cur[active] = fabric.link_dst[link]
    return links
