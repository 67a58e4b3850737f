"""Candidate paths for traffic engineering: up to ``k`` distinct paths per flow.

The routing optimizer (:func:`fabricflow.optimize_routing`) splits each flow over a small
set of candidate paths; this module builds that set as a padded int32 array
``[F, K, H]`` (``-1`` = padding; a flow with fewer than ``K`` distinct paths has all-``-1``
rows at the end).

* **Clos**: the equal-cost up/down paths of :mod:`fabricflow.routing.clos`, ``k`` of
  them spread over the path index (plane-major, then up-choices) from a hashed offset
  with a stride coprime with the path count, so the candidates differ at every level,
  the top one included (:func:`coprime_stride`). Paths
  that cross a failed link are skipped and replaced by the next surviving ones (the
  affected flows are enumerated over all their paths, vectorized over flows).
* **Torus, dragonfly, generic graphs**: distinct paths collected from the structured
  routers under different seeds and policies (torus: DOR and the random dimension orders
  of ``ecmp``; dragonfly: ``minimal`` copies then ``valiant`` detours, i.e. the shortest
  and the near-shortest paths; generic: per-hop ECMP draws), de-duplicated per flow.

Scale-up flows (both GPUs in one NVLink domain with its links up) have one candidate:
the NVLink path, as every router keeps them there.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.fabric.clos import ClosStructure
from fabricflow.fabric.dragonfly import DragonflyStructure
from fabricflow.fabric.torus import TorusStructure
from fabricflow.memory_budget import check_memory
from fabricflow.routing import hashing
from fabricflow.routing.clos import _combo_choices, _paths_for_choices, crosses_rails, lca_level
from fabricflow.routing.links_up import all_links_up
from fabricflow.routing.route import routers
from fabricflow.routing.route_limits import unreachable_error

# Peak bytes per candidate entry ([F, K, H] int64 work arrays, masks and the hash pass).
CANDIDATE_BYTES_PER_ENTRY = 40
# Router draws per wanted path on non-Clos fabrics (duplicates are common there).
DRAWS_PER_PATH = 3


def candidate_paths(fabric, src: np.ndarray, dst: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """int32 ``[F, K, H]``: up to ``k`` distinct working paths per flow, ``-1`` padded.

    Args:
        fabric: the fabric (failed links are avoided).
        src, dst: int64 ``[F]`` GPU indices, already validated (``src != dst``).
        k: paths wanted per flow (``K = k``; fewer distinct paths leave ``-1`` rows).
        seed: hash seed of the path choice.

    Raises:
        RoutingError: flows whose every path crosses a failed link (count and example).
    """
    num = src.shape[0]
    if isinstance(fabric.structure, ClosStructure):
        width = 2 * fabric.structure.levels
    else:
        width = 8
    check_memory(
        num * k * width * CANDIDATE_BYTES_PER_ENTRY,
        f"candidate paths of {num:,} flows (k={k}) on fabric {fabric.name!r}",
        hint="optimize fewer flows at a time or lower k",
    )
    if isinstance(fabric.structure, ClosStructure):
        paths = _clos_candidates(fabric, fabric.structure, src, dst, k, seed)
    else:
        paths = _router_candidates(fabric, src, dst, k, seed)
    used = int((paths >= 0).sum(axis=2).max(initial=1))
    return np.ascontiguousarray(paths[:, :, : max(used, 1)], dtype=np.int32)


def _clos_candidates(fabric, st: ClosStructure, src, dst, k: int, seed: int) -> np.ndarray:
    if st.rails > 1 and crosses_rails(fabric, st, src, dst).any():
        raise SpecError(
            "fabric",
            "candidate paths between rails of a rail-only fabric need the NVLink relay, "
            "which the routing optimizer does not list; optimize same-rail flows only, or "
            "route this fabric with ff.route (which relays)",
        )
    num = src.shape[0]
    s, t = st.slot_of_gpu[src], st.slot_of_gpu[dst]
    top = lca_level(st, s, t)
    width = 2 * st.levels
    out = np.full((num, k, width), -1, np.int64)
    local = np.zeros(num, bool)
    if st.scale_up is not None:
        local = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
        local &= fabric.link_up[st.scale_up.up[src]] & fabric.link_up[st.scale_up.down[dst]]
        out[local, 0, 0] = st.scale_up.up[src[local]]
        out[local, 0, 1] = st.scale_up.down[dst[local]]
    net = np.flatnonzero(~local)
    s, t, top = s[net], t[net], top[net]
    num_paths = st.planes * st.W[top]
    offset = hashing.choose(hashing.flow_key(src[net], dst[net], seed), 104729, num_paths)
    wanted = np.minimum(num_paths, k)
    stride = coprime_stride(num_paths, wanted)
    got = np.zeros(net.size, np.int64)
    for j in range(k):
        exists = j < wanted
        combo = (offset + j * stride) % num_paths
        plane, b = _combo_choices(st, combo, top)
        path = _paths_for_choices(st, s, t, top, plane, b)
        ok = exists & all_links_up(fabric, path)
        rows = np.flatnonzero(ok)
        out[net[rows], got[rows]] = path[rows]
        got[rows] += 1
    # Failures: flows short of min(k, paths) candidates scan all their paths for survivors.
    short = np.flatnonzero(got < wanted)
    if short.size:
        _fill_from_all_paths(fabric, st, out, got, net, short, s, t, top, k)
    if np.any(got == 0):
        raise unreachable_error(
            src[net],
            dst[net],
            got == 0,
            "on this Clos: every equal-cost path crosses a failed link",
        )
    return out


def coprime_stride(num_paths: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """int64 ``[F]``: the smallest stride ``>= num_paths / wanted`` coprime with
    ``num_paths``. Candidates ``offset + j * stride (mod num_paths)`` are then distinct for
    every ``j < num_paths`` and, as the stride is coprime with every radix of the path
    index, they cycle through the top-level choices too (a stride that is a multiple of
    the top radix would pin every candidate to one top-level switch)."""
    stride = np.maximum(num_paths // np.maximum(wanted, 1), 1)
    for _ in range(64):  # a coprime stride is always a few steps away
        bad = np.gcd(stride, num_paths) != 1
        if not bad.any():
            break
        stride = np.where(bad, stride + 1, stride)
    return stride


def _fill_from_all_paths(fabric, st, out, got, net, short, s, t, top, k):
    """Append surviving paths not already chosen to the flows ``short`` (in place)."""
    num_paths = st.planes * st.W[top[short]]
    most = int(num_paths.max())
    wanted = np.minimum(num_paths, k)
    for combo in range(most):
        need = (got[short] < wanted) & (combo < num_paths)
        if not need.any():
            break
        idx = np.flatnonzero(need)
        flows = short[idx]
        plane, b = _combo_choices(st, np.full(idx.size, combo, np.int64), top[flows])
        path = _paths_for_choices(st, s[flows], t[flows], top[flows], plane, b)
        # a path already among the flow's candidates is not taken twice
        taken = np.any(np.all(out[net[flows]] == path[:, None, :], axis=2), axis=1)
        ok = all_links_up(fabric, path) & ~taken
        flows = flows[ok]
        out[net[flows], got[flows]] = path[ok]
        got[flows] += 1


def _router_candidates(fabric, src, dst, k: int, seed: int) -> np.ndarray:
    """Distinct paths from repeated draws of the fabric's own router (non-Clos)."""
    table = routers()
    entry = table.get(type(fabric.structure), table[None])
    draws = DRAWS_PER_PATH * k
    if isinstance(fabric.structure, TorusStructure):
        plan = [("dor", 0)] + [("ecmp", seed + i) for i in range(draws - 1)]
    elif isinstance(fabric.structure, DragonflyStructure):
        half = max(draws // 2, 1)
        plan = [("ecmp", seed)] + [("minimal", seed + i) for i in range(half)]
        plan += [("valiant", seed + i) for i in range(draws - half)]
    else:
        plan = [("ecmp", seed + i) for i in range(draws)]
    drawn = [entry.route(fabric, src, dst, policy=p, seed=s_).links for p, s_ in plan]
    width = max(d.shape[1] for d in drawn)
    stacked = np.full((src.shape[0], len(drawn), width), -1, np.int64)
    for i, d in enumerate(drawn):
        stacked[:, i, : d.shape[1]] = d
    return distinct_paths(stacked, k)


def distinct_paths(paths: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` distinct non-empty rows of each flow: ``[F, R, H]`` -> ``[F, k, H]``.

    Rows are compared through a 64-bit hash of their link sequence (vectorized; a false
    match needs a 64-bit collision between two paths of one flow).
    """
    if k < 1:
        raise SpecError("k", f"paths per flow must be a positive integer, got {k!r}")
    num, draws, width = paths.shape
    with np.errstate(over="ignore"):
        h = np.zeros((num, draws), np.uint64)
        for i in range(width):  # loop over hop positions (a few), not flows
            h = hashing.splitmix64(h ^ (paths[:, :, i] + 2).astype(np.uint64))
    valid = np.any(paths >= 0, axis=2)
    same = (h[:, :, None] == h[:, None, :]) & valid[:, None, :]
    earlier = np.tril(np.ones((draws, draws), bool), -1)
    keep = valid & ~np.any(same & earlier[None], axis=2)
    rank = np.cumsum(keep, axis=1) - 1
    keep &= rank < k
    out = np.full((num, k, width), -1, np.int64)
    rows, cols = np.nonzero(keep)
    out[rows, rank[rows, cols]] = paths[rows, cols]
    return out
