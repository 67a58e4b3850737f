"""Design review from the routing optimizer's capacity gradients: which tier to upgrade
first, and what one more 400G per leaf switch buys.

:func:`upgrade_review` optimizes the routing of a flow set, takes
d(makespan)/d(capacity) (:func:`fabricflow.capacity_sensitivity`) and reports

* per link kind and tier, the makespan saved per Tb/s of capacity *bought* in that tier
  (the gradient summed over the tier's links, divided by their count: adding ``d`` to
  each of ``n`` links buys ``n d``), the ranking that says which tier to upgrade first;
* for one more 400G per leaf switch (each leaf's up- and down-links to the next tier
  widened by 400G in total, spread over them as an extra cable would be by hashing):
  the first-order prediction, the exact makespan with the routing kept, and the
  makespan after re-optimizing the routing on the upgraded fabric.

:func:`plot_upgrade_review` draws both on one figure.
"""

from __future__ import annotations

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.plots.figures import new_figure
from fabricflow.routing_optimizer.makespan import optimize_routing
from fabricflow.routing_optimizer.sensitivity import capacity_sensitivity

LEAF_TIER = 1


def leaf_uplinks(fabric) -> tuple[np.ndarray, np.ndarray]:
    """(link ids, leaf node id per link) of the links between leaf switches (tier 1) and
    the tier above, both directions."""
    tier = fabric.node_tier
    up = (tier[fabric.link_src] == LEAF_TIER) & (tier[fabric.link_dst] == LEAF_TIER + 1)
    down = (tier[fabric.link_dst] == LEAF_TIER) & (tier[fabric.link_src] == LEAF_TIER + 1)
    links = np.flatnonzero((up | down) & fabric.link_up)
    leaf = np.where(up[links], fabric.link_src[links], fabric.link_dst[links])
    return links, leaf


def upgrade_review(fabric, src, dst, size, *, k: int = 8, added_Bps: float = 50e9, seed=0):
    """The design-review numbers (a dict; see the module docstring).

    Args:
        fabric, src, dst, size, k, seed: as for :func:`fabricflow.optimize_routing`.
        added_Bps: capacity added per leaf switch and direction (default 400 Gb/s).
    """
    if not (np.isfinite(added_Bps) and added_Bps > 0):
        raise SpecError("added_Bps", f"must be a finite number > 0, got {added_Bps!r}")
    plan = optimize_routing(fabric, src, dst, size=size, k=k, seed=seed)
    routes = plan.routes()
    sens = capacity_sensitivity(fabric, routes, plan.size)
    kinds = np.asarray(fabric.link_kind)
    upper = np.maximum(fabric.node_tier[fabric.link_src], fabric.node_tier[fabric.link_dst])
    labels = np.char.add(np.char.add(kinds.astype(str), "@"), upper.astype(str))
    working = fabric.link_up
    per_tbps = {}
    for label in np.unique(labels[working]):
        members = working & (labels == label)
        # seconds saved per Tb/s bought: spread evenly over the tier's working links
        per_tbps[str(label)] = float(-sens.per_link[members].sum() / members.sum() * 1e12 / 8)
    ranking = sorted(per_tbps, key=lambda name: -per_tbps[name])

    links, leaf = leaf_uplinks(fabric)
    review = {
        "makespan_s": plan.makespan_s,
        "saved_s_per_Tbps": per_tbps,
        "upgrade_first": ranking[0] if ranking else None,
        "ranking": ranking,
    }
    if links.size:
        per_leaf_dir = np.bincount(leaf, minlength=fabric.num_nodes)  # both directions
        added = added_Bps / (per_leaf_dir[leaf] / 2.0)
        capacity = np.asarray(fabric.capacity, np.float64).copy()
        capacity[links] += added
        upgraded = fabric.with_capacity(capacity)
        load = routes.link_load(plan.size)
        used = load > 0
        fixed = float((load[used] / capacity[used]).max(initial=0.0))
        again = optimize_routing(upgraded, src, dst, size=size, k=k, seed=seed)
        review["leaf_upgrade"] = {
            "added_Bps_per_leaf": float(added_Bps),
            "leaves": int(np.unique(leaf).size),
            "first_order_s": plan.makespan_s - sens.upgrade_gain_s(links, added),
            "fixed_routing_s": fixed,
            "reoptimized_s": again.makespan_s,
        }
    return review


def plot_upgrade_review(review: dict, *, title: str = ""):
    """A two-panel :class:`matplotlib.figure.Figure` of :func:`upgrade_review`'s numbers."""
    fig = new_figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    names = review["ranking"]
    left.barh(names[::-1], [review["saved_s_per_Tbps"][n] * 1e3 for n in names[::-1]])
    left.set_xlabel("makespan saved per Tb/s bought (ms)")
    left.set_title("which tier to upgrade first")
    if "leaf_upgrade" in review:
        up = review["leaf_upgrade"]
        bars = {
            "today": review["makespan_s"],
            "first order": up["first_order_s"],
            "same routing": up["fixed_routing_s"],
            "re-optimized": up["reoptimized_s"],
        }
        right.bar(list(bars), [v * 1e3 for v in bars.values()])
        right.set_ylabel("makespan (ms)")
        right.set_title(f"+{up['added_Bps_per_leaf'] * 8 / 1e9:.0f}G per leaf")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
