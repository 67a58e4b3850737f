"""Vectorized up/down routing on Clos fabrics (see :mod:`fabricflow.fabric.clos`).

A flow between GPUs in one scale-up domain takes the NVLink path (GPU -> domain switch
-> GPU). Otherwise it leaves through its NIC port on a plane, climbs to the lowest level
``L`` whose block holds both host slots (``L = 1``: same leaf, e.g. same-rail traffic in a
rail-optimized SU), and comes down; the path is fixed by the plane and the up-choices
``b_2..b_L``, so a path is ``2 L`` links and every id is arithmetic in the slot numbers.

Policies:
    ecmp: one path per flow from a seeded hash (plane and each up-choice), as switches
        hashing the 5-tuple do; collisions are part of the model.
    multipath: ``k`` hashed paths per flow, each carrying ``1/k`` (``coef``), like
        multi-QP / flowlet load balancing.
    spray: an even split over *all* equal-cost paths (ideal packet spraying / adaptive
        routing). Row width grows with the path count; memory is checked first.
    adaptive: spray's max-min equivalent in ``2 L`` entries per flow (the fluid model of
        per-packet adaptive routing at any scale). Under spray every link of a set
        {all level-i uplinks above the source's level-i block, all planes} carries the same
        load: each flow that uses one uses all, with coefficient ``1 / (planes x W[i+1])``;
        likewise the downlinks into the destination's block. So one representative link
        per set, with that coefficient, gives the same constraints, hence the same max-min
        rates, and its load is the load of every link of the set. This holds when every
        link is up and links of one kind have one capacity (checked; otherwise ``adaptive``
        routes as ``spray``). Routes list the representatives only, so per-link loads of
        the other links of a set read 0: use ``spray`` to see every link.

PXN (``pxn=True``, NCCL's "PCI x NVLink"): on a rail-optimized fabric a flow to another
rail first crosses NVLink to the GPU of its own node that sits on the destination's rail,
then stays on that rail, as NCCL does to keep inter-node traffic rail-local. On a
rail-only fabric (``attachment: rail-only``) no switch joins two rails, so every flow
between rails of different scale-up domains takes this relay, whatever ``pxn`` says.

Failures (``fabric.without``): a path that uses a failed link is re-drawn with a fresh
salt (rejection sampling keeps the choice uniform over surviving paths); the few flows
still failing after that are resolved by enumerating all their paths. Flows with no
surviving path raise :class:`RoutingError` with the count and an example.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.clos import ClosStructure
from fabricflow.memory_budget import check_memory
from fabricflow.routing import hashing
from fabricflow.routing.links_up import all_links_up
from fabricflow.routing.multipath_rows import merge_row_entries
from fabricflow.routing.route_limits import (
    MERGE_BYTES_PER_ENTRY,
    ROUTE_BYTES_PER_ENTRY,
    unreachable_error,
)
from fabricflow.routing.routes import Routes

POLICIES = ("ecmp", "multipath", "spray", "adaptive")
REDRAWS = 24
ROUTE_CHUNK = 1 << 18  # flows per chunk of ECMP path drawing (see _single_paths)


def route_width(st: ClosStructure, policy: str, options: dict) -> tuple[int, int]:
    """(route entries per flow, peak bytes per entry): up and down, per path."""
    width = 2 * int(st.levels) + 2 * bool(options.get("pxn") or st.rails > 1)
    if policy != "multipath":
        return width, ROUTE_BYTES_PER_ENTRY
    k = options.get("k", 4)
    return width * (int(k) if isinstance(k, (int, np.integer)) and k > 0 else 1), (
        MERGE_BYTES_PER_ENTRY
    )


def route_clos(
    fabric,
    src: np.ndarray,
    dst: np.ndarray,
    *,
    policy: str = "ecmp",
    seed: int = 0,
    k: int = 4,
    pxn: bool = False,
) -> Routes:
    """Route on a Clos; see the module docstring. ``k``: paths per flow for ``multipath``;
    ``pxn``: relay cross-rail traffic over NVLink to the destination's rail first."""
    if policy not in POLICIES:
        raise SpecError(
            "policy",
            f"unknown policy {policy!r} for a Clos fabric; one of {list(POLICIES)}",
            value=policy,
            allowed=POLICIES,
        )
    st: ClosStructure = fabric.structure
    if pxn or st.rails > 1:
        return _route_pxn(fabric, st, src, dst, policy=policy, seed=seed, k=k)
    return _route_direct(fabric, st, src, dst, policy=policy, seed=seed, k=k)


def _route_direct(fabric, st: ClosStructure, src, dst, *, policy: str, seed: int, k: int):
    """Route without relays: the flows' own rails (every flow of a rail-only fabric here
    stays in one scale-up domain or on one rail)."""
    if st.rails > 1:
        crossing = crosses_rails(fabric, st, src, dst)
        if crossing.any():
            raise unreachable_error(
                src, dst, crossing, "on this rail-only fabric: no switch joins two rails"
            )
    key = hashing.flow_key(src, dst, seed)
    if policy == "ecmp":
        links = _single_paths(fabric, st, src, dst, key, draw=0)
        return Routes(links, None, src, dst, fabric.num_links, policy)
    if policy == "multipath":
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise SpecError("k", f"paths per flow must be a positive integer, got {k!r}")
        # memory: ff.route checked k paths per flow at MERGE_BYTES_PER_ENTRY (route_bytes)
        # Salts of different paths live in disjoint ranges (REDRAWS x 64 < 1e6).
        paths = [_single_paths(fabric, st, src, dst, key, draw=1_000_003 * j) for j in range(k)]
        links = np.concatenate(paths, axis=1)
        links, coef = merge_row_entries(links, np.where(links >= 0, 1.0 / k, 0.0))
        return Routes(links, coef, src, dst, fabric.num_links, policy)
    if policy == "adaptive" and _spray_sets_uniform(fabric):
        links, coef = _spray_representatives(fabric, st, src, dst)
        return Routes(links, coef, src, dst, fabric.num_links, policy)
    # spray, or adaptive where its sets are not uniform: every path listed (labelled spray,
    # which is what the rows are)
    links, coef = _spray(fabric, st, src, dst)
    return Routes(links, coef, src, dst, fabric.num_links, "spray")


def crosses_rails(fabric, st: ClosStructure, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """bool ``[F]``: flows that would need a switch joining two rails (their host slots lie
    in different top-level trees of a rail-only fabric) and cannot take the NVLink path
    (other domain, or a failed scale-up link). All False on other Clos fabrics."""
    per_tree = st.slots // st.rails
    other = st.slot_of_gpu[src] // per_tree != st.slot_of_gpu[dst] // per_tree
    if st.scale_up is not None:
        local = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
        local &= fabric.link_up[st.scale_up.up[src]] & fabric.link_up[st.scale_up.down[dst]]
        other &= ~local
    return other


def lca_level(st: ClosStructure, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """int64 ``[F]``: lowest level whose block contains both host slots (1..levels)."""
    level = np.ones(s.shape, np.int64)
    for i in range(1, st.levels):
        level += (s // st.H[i]) != (t // st.H[i])
    return level


def _paths_for_choices(st: ClosStructure, s, t, top, plane, b) -> np.ndarray:
    """Links ``[F, 2 * levels]`` of the path fixed by ``plane`` ``[F]`` and up-choices ``b``
    ``[F, levels + 1]`` (``b[:, i]`` is the choice into level ``i``; columns 0, 1 unused)."""
    num = s.shape[0]
    width = 2 * st.levels
    links = np.full((num, width), -1, np.int64)
    rows = np.arange(num)
    links[:, 0] = st.up_offset[plane, 0] + s
    links[rows, 2 * top - 1] = st.down_offset[plane, 0] + t
    choice = np.zeros(num, np.int64)
    node = s // st.m[1]
    for i in range(1, st.levels):
        active = i < top
        if not active.any():
            break
        up = st.up_offset[plane, i] + node * st.w[i + 1] + b[:, i + 1]
        choice = choice * st.w[i + 1] + b[:, i + 1]
        parent_t = (t // st.H[i + 1]) * st.W[i + 1] + choice
        digit = (t // st.H[i]) % st.m[i + 1]
        down = st.down_offset[plane, i] + parent_t * st.m[i + 1] + digit
        if active.all():  # the common case (e.g. all traffic crosses the core): no masks
            links[:, i] = up
            links[rows, 2 * top - 1 - i] = down
        else:
            links[active, i] = up[active]
            links[rows[active], (2 * top - 1 - i)[active]] = down[active]
        node = (s // st.H[i + 1]) * st.W[i + 1] + choice
    return links


def _draw(st: ClosStructure, key: np.ndarray, salt: int) -> tuple[np.ndarray, np.ndarray]:
    plane = hashing.choose(key, salt, st.planes)
    b = np.zeros((key.shape[0], st.levels + 1), np.int64)
    for i in range(2, st.levels + 1):
        b[:, i] = hashing.choose(key, salt + i, st.w[i])
    return plane, b


def _single_paths(fabric, st: ClosStructure, src, dst, key, draw: int) -> np.ndarray:
    """One path per flow (ECMP), redrawn around failures. int32 ``[F, H]``."""
    num = src.shape[0]
    s, t = st.slot_of_gpu[src], st.slot_of_gpu[dst]
    top = lca_level(st, s, t)
    # int32 from the start (link ids fit: Routes hold int32), half the bytes of int64.
    links = np.full((num, 2 * st.levels), -1, np.int32)
    local = np.zeros(num, bool)
    if st.scale_up is not None:
        local = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
        links[local, 0] = st.scale_up.up[src[local]]
        links[local, 1] = st.scale_up.down[dst[local]]
        local &= all_links_up(fabric, links)  # failed NVLink: fall back to the network
    network = np.flatnonzero(~local)
    # Paths are drawn in chunks of flows: a flow's path depends only on its own key, slots
    # and salt, so chunking changes no route, and the [chunk, levels] temporaries stay in
    # cache (10M flows routed at once ran ~3x slower per flow than 1M, and took 2x memory).
    left = [
        _draw_chunk(fabric, st, s, t, top, key, links, network[start : start + ROUTE_CHUNK], draw)
        for start in range(0, network.size, ROUTE_CHUNK)
    ]
    pending = np.concatenate(left) if left else network
    if pending.size:
        links[pending] = _enumerate_surviving(
            fabric,
            st,
            s[pending],
            t[pending],
            top[pending],
            key[pending],
            src[pending],
            dst[pending],
        )
    used = max(int((links >= 0).sum(axis=1).max(initial=2)), 2)
    return links if used == links.shape[1] else np.ascontiguousarray(links[:, :used])


def _draw_chunk(fabric, st, s, t, top, key, links, pending, draw: int) -> np.ndarray:
    """Draw ECMP paths for the flows ``pending`` (indices), redrawing around failed links
    up to ``REDRAWS`` times; writes ``links`` rows in place and returns the flows still
    without a working path."""
    for attempt in range(REDRAWS):
        if pending.size == 0:
            break
        plane, b = _draw(st, key[pending], salt=draw + 64 * attempt)
        candidate = _paths_for_choices(st, s[pending], t[pending], top[pending], plane, b)
        ok = all_links_up(fabric, candidate)
        links[pending[ok]] = candidate[ok]
        pending = pending[~ok]
    return pending


def _combo_choices(st: ClosStructure, combo: np.ndarray, top: np.ndarray):
    """Decode path index ``combo`` (plane-major, then b_2..b_top mixed radix) per flow."""
    count_per_plane = st.W[top]
    plane = combo // count_per_plane
    rest = combo % count_per_plane
    b = np.zeros((combo.shape[0], st.levels + 1), np.int64)
    for i in range(st.levels, 1, -1):
        active = i <= top
        b[active, i] = rest[active] % st.w[i]
        rest = np.where(active, rest // st.w[i], rest)
    return plane, b


def _enumerate_surviving(fabric, st, s, t, top, key, src, dst) -> np.ndarray:
    """Uniform choice among all surviving paths, for flows rejection did not resolve."""
    num_paths = st.planes * st.W[top]
    most = int(num_paths.max())
    alive = np.zeros((s.shape[0], most), bool)
    for combo in range(most):
        exists = combo < num_paths
        plane, b = _combo_choices(st, np.minimum(combo, num_paths - 1), top)
        alive[:, combo] = exists & all_links_up(fabric, _paths_for_choices(st, s, t, top, plane, b))
    count = alive.sum(axis=1)
    if np.any(count == 0):
        raise unreachable_error(
            src, dst, count == 0, "on this Clos: every equal-cost path crosses a failed link"
        )
    pick = hashing.choose(key, 7919, np.maximum(count, 1))
    combo = np.argmax(np.cumsum(alive, axis=1) > pick[:, None], axis=1)
    plane, b = _combo_choices(st, combo, top)
    return _paths_for_choices(st, s, t, top, plane, b)


def _spray(fabric, st: ClosStructure, src, dst) -> tuple[np.ndarray, np.ndarray]:
    """Even split over all surviving equal-cost paths of every flow."""
    num = src.shape[0]
    if num == 0:
        return np.zeros((0, 2), np.int32), np.zeros((0, 2), np.float32)
    s, t = st.slot_of_gpu[src], st.slot_of_gpu[dst]
    top = lca_level(st, s, t)
    local = np.zeros(num, bool)
    if st.scale_up is not None:
        local = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
        local &= fabric.link_up[st.scale_up.up[src]] & fabric.link_up[st.scale_up.down[dst]]
    num_paths = np.where(local, 1, st.planes * st.W[top])
    most = int(num_paths.max(initial=1))
    entries = num * most * 2 * st.levels
    check_memory(
        entries * MERGE_BYTES_PER_ENTRY,
        f"spray routing of {num:,} flows over up to {most} paths ({entries:,} route entries)",
        hint="route fewer flows or use policy='multipath' with k paths",
    )
    links = np.full((num, most, 2 * st.levels), -1, np.int64)
    alive = np.zeros((num, most), bool)
    for combo in range(most):
        exists = (combo < num_paths) & ~local
        plane, b = _combo_choices(st, np.minimum(combo, num_paths - 1), top)
        path = _paths_for_choices(st, s, t, top, plane, b)
        ok = exists & all_links_up(fabric, path)
        links[ok, combo] = path[ok]
        alive[:, combo] = ok
    if st.scale_up is not None and local.any():
        links[local, 0, 0] = st.scale_up.up[src[local]]
        links[local, 0, 1] = st.scale_up.down[dst[local]]
        alive[local, 0] = True
    count = alive.sum(axis=1)
    if np.any(count == 0):
        raise unreachable_error(
            src, dst, count == 0, "on this Clos: every equal-cost path crosses a failed link"
        )
    coef = np.where(links >= 0, (1.0 / np.maximum(count, 1))[:, None, None], 0.0)
    links, coef = merge_row_entries(links.reshape(num, -1), coef.reshape(num, -1))
    if not np.all(np.isfinite(coef)):
        raise RoutingError("internal error: non-finite spray coefficients")
    return links, coef


def _spray_sets_uniform(fabric) -> bool:
    """Every link up, and one capacity and one latency per link kind: then the links of
    each spray set carry equal loads (``adaptive`` is exact, see the module docstring) and
    a representative's latency is that of every link of its set."""
    if not fabric.link_up.all():
        return False
    kind = fabric.link_kind_id.astype(np.int64)
    for values in (fabric.capacity, fabric.latency):
        low = np.full(len(fabric.link_kinds), np.inf)
        high = np.full(len(fabric.link_kinds), -np.inf)
        np.minimum.at(low, kind, values)
        np.maximum.at(high, kind, values)
        present = np.isfinite(low)
        if not np.all(low[present] == high[present]):
            return False
    return True


def spray_set_of_links(fabric) -> np.ndarray:
    """int64 ``[L]``: for every link, the link that stands for its spray set in
    ``adaptive`` routes (:func:`_spray_representatives`); itself for a link outside any set
    (scale-up links, links of other structures) and for the representatives.

    A set is, per level ``i`` and direction, the uplinks of one level-``i`` block (all its
    switches' uplinks, every plane) or the downlinks from one level-``(i+1)`` block into
    one child block (every choice and plane); its representative is the plane-0, choice-0
    member. ``values[spray_set_of_links(fabric)]`` turns per-link values of ``adaptive``
    routes (loads, utilizations: the representatives' only) into every link's value,
    which is what ``spray`` gives link by link on a fabric whose sets are uniform.
    """
    rep = np.arange(fabric.num_links, dtype=np.int64)
    st = fabric.structure
    if not isinstance(st, ClosStructure):
        return rep
    for level in range(st.levels):
        choices = int(st.W[level + 1])
        ups = st.slots if level == 0 else int(st.N[level]) * int(st.w[level + 1])
        r = np.arange(ups, dtype=np.int64)
        for plane in range(st.planes):
            # uplink numbering: block * W[i+1] + (choice x parent index), see build_clos
            rep[st.up_offset[plane, level] + r] = st.up_offset[0, level] + r // choices * choices
        fan = int(st.m[level + 1])
        downs = st.slots if level == 0 else int(st.N[level + 1]) * fan
        r = np.arange(downs, dtype=np.int64)
        node, digit = (r, 0) if level == 0 else (r // fan, r % fan)
        first = node - node % choices  # choice 0 of the parent's block
        target = first if level == 0 else first * fan + digit
        for plane in range(st.planes):
            rep[st.down_offset[plane, level] + r] = st.down_offset[0, level] + target
    return rep


def adaptive_link_values(fabric, values: np.ndarray) -> np.ndarray:
    """Per-link ``values`` ``[L]`` of flows routed ``adaptive`` as every link carries them:
    each spray set's links take their representative's value (:func:`spray_set_of_links`)
    where ``adaptive`` used representatives (a Clos whose sets are uniform); elsewhere
    ``adaptive`` listed every path and ``values`` is returned as it is."""
    values = np.asarray(values)
    if not isinstance(fabric.structure, ClosStructure) or not _spray_sets_uniform(fabric):
        return values
    return values[spray_set_of_links(fabric)]


def _spray_representatives(fabric, st: ClosStructure, src, dst) -> tuple[np.ndarray, np.ndarray]:
    """``adaptive`` rows: per level and direction, the first link of the flow's spray set
    (plane 0, choice 0) with the set's share ``1 / (planes x W[i+1])``. int32 / float32
    ``[F, 2 L]``."""
    num = src.shape[0]
    s, t = st.slot_of_gpu[src], st.slot_of_gpu[dst]
    top = lca_level(st, s, t)
    links = np.full((num, 2 * st.levels), -1, np.int64)
    coef = np.zeros(links.shape)
    rows = np.arange(num)
    local = np.zeros(num, bool)
    if st.scale_up is not None:
        local = fabric.gpu_domain[src] == fabric.gpu_domain[dst]
        links[local, 0] = st.scale_up.up[src[local]]
        links[local, 1] = st.scale_up.down[dst[local]]
        coef[local, :2] = 1.0
    net = ~local
    links[net, 0] = st.up_offset[0, 0] + s[net]
    links[rows[net], (2 * top - 1)[net]] = st.down_offset[0, 0] + t[net]
    coef[net, 0] = 1.0 / st.planes
    coef[rows[net], (2 * top - 1)[net]] = 1.0 / st.planes
    for i in range(1, st.levels):
        active = net & (i < top)
        if not active.any():
            break
        share = 1.0 / (st.planes * int(st.W[i + 1]))
        # Level-i node (block s // H[i], choice 0) and its uplink 0; the destination side's
        # parent (block t // H[i+1], choice 0) and its downlink to t's level-i block.
        up = st.up_offset[0, i] + (s // st.H[i]) * st.W[i + 1]
        parent = (t // st.H[i + 1]) * st.W[i + 1]
        down = st.down_offset[0, i] + parent * st.m[i + 1] + (t // st.H[i]) % st.m[i + 1]
        column = 2 * top - 1 - i
        links[active, i] = up[active]
        coef[active, i] = share
        links[rows[active], column[active]] = down[active]
        coef[rows[active], column[active]] = share
    used = int((links >= 0).sum(axis=1).max(initial=2))
    return links[:, : max(used, 2)].astype(np.int32), coef[:, : max(used, 2)].astype(np.float32)


def _route_pxn(fabric, st: ClosStructure, src, dst, *, policy, seed, k) -> Routes:
    """Cross-rail flows hop over NVLink to the proxy GPU on the destination's rail
    (optional on a rail-optimized fabric, the only way between rails on a rail-only one)."""
    if st.scale_up is None:
        raise SpecError("pxn", "PXN needs a scale-up (NVLink) domain; this fabric has none")
    if st.attachment == "tor":
        raise SpecError(
            "pxn",
            "PXN relays traffic to the destination's rail; this fabric has "
            f"attachment {st.attachment!r}, where it would only add NVLink hops",
        )
    per_node = fabric.gpus_per_node
    proxy = src - src % per_node + dst % per_node
    relay = (proxy != src) & (fabric.gpu_domain[src] != fabric.gpu_domain[dst])
    relay &= fabric.gpu_domain[proxy] == fabric.gpu_domain[src]
    nvlink_up = fabric.link_up[st.scale_up.up[src]] & fabric.link_up[st.scale_up.down[proxy]]
    if st.rails > 1 and np.any(relay & ~nvlink_up):
        raise unreachable_error(
            src,
            dst,
            relay & ~nvlink_up,
            "on this rail-only fabric: traffic between rails needs the NVLink relay, "
            "which crosses a failed scale-up link",
        )
    # A failed NVLink on either side of the relay: send directly instead.
    relay &= nvlink_up
    first_hop = np.where(relay, proxy, src)
    inner = _route_direct(fabric, st, first_hop, dst, policy=policy, seed=seed, k=k)
    hop = np.full((src.shape[0], 2), -1, np.int64)
    hop[relay, 0] = st.scale_up.up[src[relay]]
    hop[relay, 1] = st.scale_up.down[proxy[relay]]
    links = np.concatenate([hop, inner.links], axis=1)
    coef = None
    if inner.coef is not None:
        coef = np.concatenate([np.where(hop >= 0, 1.0, 0.0), inner.coef], axis=1)
    # Left-align: rows without a relay have their padding first.
    order = np.argsort(links < 0, axis=1, kind="stable")
    links = np.take_along_axis(links, order, axis=1)
    if coef is not None:
        coef = np.take_along_axis(coef, order, axis=1)
    used = int((links >= 0).sum(axis=1).max(initial=2))
    return Routes(
        links[:, :used],
        None if coef is None else coef[:, :used],
        src,
        dst,
        fabric.num_links,
        inner.policy + "+pxn",
    )
