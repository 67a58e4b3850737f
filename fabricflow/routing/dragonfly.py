"""Vectorized minimal and Valiant routing on dragonfly fabrics
(see :mod:`fabricflow.fabric.dragonfly` for the link arrangement).

Paths, with ``ss``/``ts`` the source/destination switches and ``[...]`` a hop taken only
when the two switches differ:

* same switch: ``nic up, nic down``; same scale-up domain: ``nvlink up, nvlink down``;
* same group: ``nic up, local ss->ts, nic down`` (every policy);
* other group, through copy ``c`` of the global cables between the groups:
  ``nic up, [local ss->out], global, [local in->ts], nic down``.

Policies:
    minimal: one global hop; the copy ``c`` is picked by a seeded hash among all ``k``
        copies (what a switch spreading over all minimal ports does).
    ecmp: one global hop through a copy with the fewest local hops; hash among those
        copies. Its hop count is the shortest of the one-global-hop paths.
    valiant: through a hashed intermediate group ``I`` (not the source's or the
        destination's): minimal to a switch of ``I``, then minimal to the destination,
        ``nic, [local], global, [local], global, [local], nic`` (at most 7 links).
        Flows inside one group stay minimal; with 2 groups Valiant equals minimal.

Failures (``fabric.without``): a flow whose path crosses a failed link tries the other
copies (minimal/ecmp) or fresh hashed intermediate groups and copies (valiant); flows
still cut off take the shortest working path of the generic router (which may use two
local hops or another group). Flows with no working path raise :class:`RoutingError`.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.dragonfly import DragonflyStructure
from fabricflow.routing import hashing
from fabricflow.routing.links_up import redraw_then_detour
from fabricflow.routing.route_limits import ROUTE_BYTES_PER_ENTRY
from fabricflow.routing.routes import Routes

POLICIES = ("minimal", "ecmp", "valiant")
WIDTH = 7
REDRAWS = 16


def route_width(st: DragonflyStructure, policy: str, options: dict) -> tuple[int, int]:
    """(route entries per flow, peak bytes per entry): at most :data:`WIDTH` links."""
    return WIDTH, ROUTE_BYTES_PER_ENTRY


def route_dragonfly(
    fabric, src: np.ndarray, dst: np.ndarray, *, policy: str = "ecmp", seed: int = 0
) -> Routes:
    """Route GPU pairs on a dragonfly; see the module docstring for the policies."""
    if policy not in POLICIES:
        raise SpecError(
            "policy",
            f"unknown policy {policy!r} for a dragonfly fabric; one of {list(POLICIES)}",
            value=policy,
            allowed=POLICIES,
        )
    st: DragonflyStructure = fabric.structure
    key = hashing.flow_key(src, dst, seed)
    links = _paths(fabric, st, src, dst, key, policy, attempt=0)

    def other_path(pending: np.ndarray, attempt: int) -> np.ndarray:
        return _paths(fabric, st, src[pending], dst[pending], key[pending], policy, attempt)

    links = redraw_then_detour(
        fabric,
        links,
        src,
        dst,
        key,
        attempts=st.copies if policy != "valiant" else REDRAWS,
        redraw=other_path,
        min_width=2,
        why="on this dragonfly: failures cut every working path",
    )
    return Routes(links, None, src, dst, fabric.num_links, policy)


def _paths(fabric, st: DragonflyStructure, src, dst, key, policy: str, attempt: int) -> np.ndarray:
    """int64 ``[F, 7]`` links of one path per flow, padding at the end of each row.

    ``attempt`` > 0 gives the alternatives tried around failures: the next copies in a
    fixed rotation (minimal/ecmp) or a fresh hash (valiant)."""
    a = st.switches_per_group
    num = src.shape[0]
    ss, ts = st.switch_of_gpu(src), st.switch_of_gpu(dst)
    gs, gt = ss // a, ts // a
    ls, lt = ss % a, ts % a
    cols = np.full((num, WIDTH), -1, np.int64)
    cols[:, 0] = st.nic_up_offset + src
    cols[:, WIDTH - 1] = st.nic_down_offset + dst
    same_group = gs == gt
    rows = np.flatnonzero(same_group & (ls != lt))
    cols[rows, 1] = st.local_link(gs[rows], ls[rows], lt[rows])

    other = np.flatnonzero(~same_group)
    if policy == "valiant" and st.groups >= 3:
        salt = 1000 + 97 * attempt
        pick = hashing.choose(key[other], salt, st.groups - 2)
        lo, hi = np.minimum(gs[other], gt[other]), np.maximum(gs[other], gt[other])
        mid = pick + (pick >= lo)
        mid = mid + (mid >= hi)
        c1 = hashing.choose(key[other], salt + 1, st.copies)
        c2 = hashing.choose(key[other], salt + 2, st.copies)
        arrive = _group_hop(st, cols, other, gs[other], mid, ls[other], c1, first=1)
        land = _group_hop(st, cols, other, mid, gt[other], arrive, c2, first=3)
        _last_local(st, cols, other, gt[other], land, lt[other], column=5)
    else:
        # Valiant with 2 groups has no intermediate group: it is minimal routing.
        copy = _pick_copy(
            st,
            key[other],
            gs[other],
            gt[other],
            ls[other],
            lt[other],
            "minimal" if policy == "valiant" else policy,
            attempt,
        )
        land = _group_hop(st, cols, other, gs[other], gt[other], ls[other], copy, first=1)
        _last_local(st, cols, other, gt[other], land, lt[other], column=3)

    if st.scale_up is not None:
        local = np.flatnonzero(fabric.gpu_domain[src] == fabric.gpu_domain[dst])
        cols[local] = -1
        cols[local, 0] = st.scale_up.up[src[local]]
        cols[local, WIDTH - 1] = st.scale_up.down[dst[local]]
    return _compact(cols)


def _pick_copy(st, key, gs, gt, ls, lt, policy, attempt) -> np.ndarray:
    """Copy of the global cable between the groups for each flow (minimal / ecmp)."""
    k = st.copies
    if policy == "minimal" or k == 1:
        return (hashing.choose(key, 7, k) + attempt) % k
    copies = np.arange(k)[None, :]
    local_hops = (st.global_switch(gs[:, None], gt[:, None], copies) != ls[:, None]).astype(
        np.int64
    ) + (st.global_switch(gt[:, None], gs[:, None], copies) != lt[:, None])
    best = local_hops == local_hops.min(axis=1, keepdims=True)
    count = best.sum(axis=1)
    # attempt 0: hash among the best copies; later attempts: the other copies in rotation.
    pick = (hashing.choose(key, 7, count) + attempt) % k
    ranked = np.argsort(~best, axis=1, kind="stable")  # best copies first
    return ranked[np.arange(key.shape[0]), pick]


def _group_hop(st, cols, rows, group, other, at, copy, first: int) -> np.ndarray:
    """Write ``[local at->out], global`` into columns ``first``, ``first + 1`` of ``rows``;
    returns the switch index reached in ``other``."""
    out = st.global_switch(group, other, copy)
    move = out != at
    cols[rows[move], first] = st.local_link(group[move], at[move], out[move])
    cols[rows, first + 1] = st.global_link(group, other, copy)
    return st.global_switch(other, group, copy)


def _last_local(st, cols, rows, group, at, target, column: int) -> None:
    move = at != target
    cols[rows[move], column] = st.local_link(group[move], at[move], target[move])


def _compact(cols: np.ndarray) -> np.ndarray:
    """Move the -1 gaps of each row to its end, keeping the order of the links."""
    order = np.argsort(cols < 0, axis=1, kind="stable")
    return np.take_along_axis(cols, order, axis=1)
