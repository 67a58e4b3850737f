"""Fabric summaries computed from the built arrays (never echoed from the spec).

* switches: network (scale-out, tiers >= 1) and scale-up (one per NVLink-style domain)
  counted apart, and ``num_switches``, their sum (every switch node, as
  :attr:`Fabric.num_switches`);
* links and cables per kind: directed links, and the physical cables they bundle (a
  cable counted once for its two directions; parallel cables between one switch pair
  are one link);
* tiers: for each switch tier t >= 1, the switch count, the oversubscription
  ``capacity of links from tier-t switches down to lower tiers / capacity of links up
  to higher tiers`` (``None`` for the top tier), and the ports in use per switch against
  the switch's ports where the spec gives them (a warning when some stay unused);
* bisection bandwidth (scale-out, one direction): the capacity of the minimum cut
  between the two halves of the GPUs under the fabric's natural halving. Structured
  fabrics provide it arithmetically (``structure.bisection_Bps(fabric)``); otherwise it is
  a max-flow over the scale-out graph (scipy), for fabrics of modest size. Per GPU it is
  quoted as network architects do: over the GPUs of one half (``bisection / (G / 2)``,
  what each of them can send across at once) and as a fraction of full bisection (every
  GPU of one half injecting at its full scale-out bandwidth; 1.0 = non-blocking).
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.memory_budget import out_of_memory

MAX_FLOW_LINK_LIMIT = 2_000_000


def fabric_summary(fabric) -> dict:
    """Counts, capacities per link kind, oversubscription per tier and bisection bandwidth
    of ``fabric`` (plain JSON-ready values; bandwidths in bytes/s).

    Raises:
        MemoryBudgetError: the summary does not fit in this process's memory.
        SpecError: the bisection needs a max-flow too large for scipy
            (:func:`max_flow_between`).
    """
    try:
        return _fabric_summary(fabric)
    except MemoryError as error:
        raise out_of_memory(error, f"summarising fabric {fabric.name!r}") from error


def _fabric_summary(fabric) -> dict:
    up = fabric.link_up
    links_per_kind, capacity_per_kind = {}, {}
    for kind_id, kind in enumerate(fabric.link_kinds):
        mask = (fabric.link_kind_id == kind_id) & up
        if mask.any():
            links_per_kind[kind] = int(mask.sum())
            capacity_per_kind[kind] = float(fabric.capacity[mask].sum())
    tiers = _tiers(fabric)
    bisection = bisection_bandwidth(fabric)
    injection = _injection_Bps(fabric)
    half = fabric.num_gpus / 2
    return {
        "name": fabric.name,
        "description": fabric.meta.get("description", ""),
        "num_gpus": fabric.num_gpus,
        "gpus_per_node": fabric.gpus_per_node,
        "num_nodes": fabric.num_nodes,
        "num_switches": fabric.num_switches,
        "num_network_switches": fabric.num_network_switches,
        "num_scale_up_switches": fabric.num_scale_up_switches,
        "scale_up_link_kind": fabric.scale_up_link_kind,
        "num_links": fabric.num_links,
        "failed_links": int((~up).sum()),
        "failed_cables": int(fabric.meta.get("failed_cables", 0)),
        # up, but with fewer cables than built: bundles partly failed, at reduced capacity
        "reduced_links": int(fabric.meta.get("reduced_links", 0)),
        "scale_up_domain_size": int(fabric.meta.get("scale_up_domain_size", 1)),
        "links_per_kind": links_per_kind,
        "cables_per_kind": cables_per_kind(fabric),
        "capacity_per_kind_Bps": capacity_per_kind,
        "tiers": tiers,
        "bisection_bandwidth_Bps": bisection,
        "bisection_per_gpu_Bps": bisection / half if half else 0.0,
        "full_bisection_Bps": injection / 2,
        "bisection_ratio": bisection / (injection / 2) if injection > 0 else None,
        "bisection_definition": "min cut, one direction, between the halves of the GPUs "
        "(natural halving of the topology), scale-out links only; per GPU: over the GPUs "
        "of one half; ratio: to full bisection (every GPU of one half at its full "
        "scale-out bandwidth)",
        "warnings": [t["warning"] for t in tiers if t.get("warning")],
    }


def cables_per_kind(fabric) -> dict[str, int]:
    """Working physical cables per link kind: each cable once (not per direction), each
    of the parallel cables a link bundles apart."""
    once = (fabric.link_src < fabric.link_dst) | (fabric.reverse_links() < 0)
    counts = np.bincount(
        fabric.link_kind_id[once],
        weights=fabric.link_cables[once],
        minlength=len(fabric.link_kinds),
    )
    return {kind: int(counts[i]) for i, kind in enumerate(fabric.link_kinds) if counts[i] > 0}


def _injection_Bps(fabric) -> float:
    """bytes/s: the scale-out capacity leaving all GPUs (NIC or chip-to-chip links)."""
    is_gpu = fabric.node_tier == 0
    scale_up = fabric.node_tier < 0
    leaving = is_gpu[fabric.link_src] & ~scale_up[fabric.link_dst] & fabric.link_up
    return float(fabric.capacity[leaving].sum())


def _tiers(fabric) -> list[dict]:
    """One entry per switch tier >= 1: count, oversubscription, capacities, port use."""
    up = fabric.link_up
    src_tier = fabric.node_tier[fabric.link_src].astype(np.int64)
    dst_tier = fabric.node_tier[fabric.link_dst].astype(np.int64)
    kinds = fabric.node_kind
    # physical ports in use on each node: one per working cable leaving it
    ports_used = np.bincount(
        fabric.link_src, weights=fabric.link_cables, minlength=fabric.num_nodes
    ).astype(np.int64)
    declared = fabric.meta.get("switch_ports", {})
    tiers = []
    for tier in sorted(set(fabric.node_tier[fabric.node_tier >= 1].tolist())):
        switches = np.flatnonzero(fabric.node_tier == tier)
        leaving = up & (src_tier == tier)
        down_cap = fabric.capacity[leaving & (dst_tier < tier) & (dst_tier >= 0)].sum()
        up_cap = fabric.capacity[leaving & (dst_tier > tier)].sum()
        name = str(kinds[switches[0]])
        used = ports_used[switches]
        ports = declared.get(name)
        entry = {
            "name": name,
            "tier": int(tier),
            "switches": int(switches.size),
            "oversubscription": float(down_cap / up_cap) if up_cap > 0 else None,
            "down_capacity_Bps": float(down_cap),
            "up_capacity_Bps": float(up_cap),
            "ports_per_switch": None if ports is None else int(ports),
            "ports_used": {"min": int(used.min()), "max": int(used.max())},
        }
        if ports is not None and used.max() < ports:
            spread = f"{used.min()}" if used.min() == used.max() else f"{used.min()}-{used.max()}"
            entry["warning"] = (
                f"{name}: {spread} of {ports} ports used per switch "
                f"({int(ports * switches.size - used.sum()):,} of the tier's "
                f"{ports * switches.size:,} ports unused): the tier could serve more, or "
                "take smaller switches"
            )
        tiers.append(entry)
    return tiers


def failure_counts(fabric) -> dict[str, int]:
    """What failures (:meth:`Fabric.without`) took from ``fabric``: ``failed_cables``
    (physical cables, each once), ``failed_links`` (directed links down) and
    ``reduced_links`` (directed links still up with fewer cables than built: bundles
    partly failed, at reduced capacity). All 0 on an intact fabric."""
    return {
        "failed_cables": int(fabric.meta.get("failed_cables", 0)),
        "failed_links": int((~np.asarray(fabric.link_up, bool)).sum()),
        "reduced_links": int(fabric.meta.get("reduced_links", 0)),
    }


def failure_text(counts: dict) -> str:
    """``'35 cables failed: 0 directed links down, 70 up at reduced capacity (bundles
    partly failed)'`` for :func:`failure_counts` (or a summary holding its keys);
    ``'none'`` when nothing failed."""
    if not any(counts[key] for key in ("failed_cables", "failed_links", "reduced_links")):
        return "none"
    cables, links = counts["failed_cables"], counts["failed_links"]
    text = (
        f"{cables:,} cable{'' if cables == 1 else 's'} failed: {links:,} directed "
        f"link{'' if links == 1 else 's'} down"
    )
    if counts["reduced_links"]:
        text += (
            f", {counts['reduced_links']:,} up at reduced capacity (bundles of parallel "
            "cables partly failed)"
        )
    return text


def port_usage_text(tier: dict) -> str:
    """``'16 of 64'`` (or ``'56-57'`` where the switch's ports are not known): the ports
    in use per switch of a tier entry of :func:`fabric_summary`."""
    used = tier["ports_used"]
    text = f"{used['min']}" if used["min"] == used["max"] else f"{used['min']}-{used['max']}"
    return text if tier["ports_per_switch"] is None else f"{text} of {tier['ports_per_switch']}"


def bisection_bandwidth(fabric) -> float:
    structure = fabric.structure
    if structure is not None and hasattr(structure, "bisection_Bps"):
        return float(structure.bisection_Bps(fabric))
    half = np.arange(fabric.num_gpus) < fabric.num_gpus // 2
    return max_flow_between(fabric, half, ~half, scale_out_only=True)


def max_flow_between(
    fabric, side_a: np.ndarray, side_b: np.ndarray, *, scale_out_only: bool = True
) -> float:
    """Max flow (bytes/s) from the GPUs in ``side_a`` to those in ``side_b`` (bool ``[G]``).

    scipy's max-flow works on int32 capacities, so capacities are expressed in a unit:
    their greatest common divisor in bytes/s (exact), coarsened by a whole factor only if
    the total would not fit in int32 (then rounded, relative error below ~1e-9 of the
    total). The super-source/sink edges carry each GPU's own scale-out capacity rather
    than "infinity", so nothing overflows. Links of scale-up switches are excluded when
    ``scale_out_only``, so the figure is what the network offers.

    Raises:
        SpecError: (``fabric``) more than :data:`MAX_FLOW_LINK_LIMIT` links; (``capacity``)
            capacities that do not fit int32 after rescaling.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    if fabric.num_links > MAX_FLOW_LINK_LIMIT:
        raise SpecError(
            "fabric",
            f"a max-flow over {fabric.num_links:,} links is too large for scipy's max-flow "
            f"(limit {MAX_FLOW_LINK_LIMIT:,} links); use a structured generator (clos, torus, "
            "dragonfly: their bisection is arithmetic) or a smaller fabric",
        )
    keep = fabric.link_up.copy()
    if scale_out_only:
        tier = fabric.node_tier
        keep &= ~((tier[fabric.link_src] < 0) | (tier[fabric.link_dst] < 0))
    capacity = np.where(keep, fabric.capacity, 0.0)
    n = fabric.num_nodes
    source, sink = n, n + 1
    sends = np.bincount(fabric.link_src, weights=capacity, minlength=n)[fabric.gpu_node]
    receives = np.bincount(fabric.link_dst, weights=capacity, minlength=n)[fabric.gpu_node]
    total = capacity.sum() + sends.sum() + receives.sum()
    unit = _integer_unit(np.concatenate([capacity, sends, receives]), total)
    rows = np.concatenate(
        [fabric.link_src[keep], np.full(int(side_a.sum()), source), fabric.gpu_node[side_b]]
    )
    cols = np.concatenate(
        [fabric.link_dst[keep], fabric.gpu_node[side_a], np.full(int(side_b.sum()), sink)]
    )
    caps = np.concatenate([capacity[keep], sends[side_a], receives[side_b]])
    caps = np.round(caps / unit).astype(np.int64)
    # csr_matrix sums duplicate (parallel) edges, which is right for max-flow.
    graph = csr_matrix((caps, (rows, cols)), shape=(n + 2, n + 2))
    graph.sum_duplicates()
    if graph.data.size and graph.data.max() >= np.iinfo(np.int32).max:
        raise SpecError(
            "capacity",
            "link capacities do not fit scipy's max-flow, which takes int32 capacities: "
            f"the largest is {graph.data.max():,} units of {unit:.6g} B/s even after "
            "rescaling; use a structured generator (clos, torus, dragonfly)",
        )
    flow = maximum_flow(graph.astype(np.int32), source, sink)
    return float(flow.flow_value * unit)


def _integer_unit(values: np.ndarray, total: float) -> float:
    """A unit (bytes/s) in which ``values`` are integers and ``total`` fits in 2**30."""
    whole = np.round(values[values > 0]).astype(np.int64)
    base = int(np.gcd.reduce(whole)) if whole.size else 1
    return float(base * max(1, int(np.ceil(total / (base * 2**30)))))


__all__ = [
    "bisection_bandwidth",
    "cables_per_kind",
    "fabric_summary",
    "failure_counts",
    "failure_text",
    "max_flow_between",
    "port_usage_text",
]
