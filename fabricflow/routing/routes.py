"""The :class:`Routes` object: padded per-flow link lists, the routing -> solver boundary.

``links[f, h]`` is the link id of hop ``h`` of flow ``f`` (``-1`` = padding). For multipath
splits, a flow's paths are laid side by side along the hop axis and ``coef[f, h]`` is the
fraction of the flow carried by that entry (entries of the same link are merged, so a link
appears once per row with the sum of the fractions of the paths through it). ``coef`` is
``None`` for single-path routing (every entry carries the whole flow).

The hop width ``H`` is decided on the host when routes are built (the longest path, or
paths x hops for splits) and is a static shape for the jitted solvers: a new ``H``
compiles anew, a new fabric capacity does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.link_loads import link_load
from fabricflow.typing import Coef, GpuIndex, LinkIds


@dataclasses.dataclass(frozen=True, eq=False)
class Routes:
    """Padded routes of ``F`` flows over a fabric of ``num_links`` links.

    Attributes:
        links: int32 ``[F, H]`` link ids, ``-1`` padded (padding at the end of each row).
        coef: float32 ``[F, H]`` share of the flow on each entry, or ``None`` (all 1).
        src, dst: int ``[F]`` GPU indices.
        num_links: number of links of the fabric (the range of link ids).
        policy: routing policy that produced the routes (``ecmp``, ``multipath``, ...).
    """

    links: LinkIds
    coef: Coef | None
    src: GpuIndex
    dst: GpuIndex
    num_links: int
    policy: str = "ecmp"

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", np.ascontiguousarray(self.links, dtype=np.int32))
        if self.coef is not None:
            object.__setattr__(self, "coef", np.ascontiguousarray(self.coef, dtype=np.float32))
            if self.coef.shape != self.links.shape:
                raise SpecError(
                    "coef",
                    f"shape {self.coef.shape} differs from links shape "
                    f"{self.links.shape}; coef must be [F, H] like links",
                )
        if self.links.ndim != 2:
            raise SpecError("links", f"must be [F, H] (flows x hops), got shape {self.links.shape}")
        if self.links.size and (self.links.min() < -1 or self.links.max() >= self.num_links):
            raise SpecError(
                "links",
                f"link ids must lie in 0..{self.num_links - 1} (-1 = "
                f"padding), got {self.links.min()}..{self.links.max()}",
            )

    @property
    def num_flows(self) -> int:
        return int(self.links.shape[0])

    @property
    def max_hops(self) -> int:
        return int(self.links.shape[1])

    @property
    def hop_count(self) -> np.ndarray:
        """int32 ``[F]``: number of valid entries per row (path length for single paths)."""
        return (self.links >= 0).sum(axis=1).astype(np.int32)

    def path_latency(self, latency: np.ndarray) -> np.ndarray:
        """float64 ``[F]`` seconds: sum of link latencies along each flow's path.

        For multipath splits, the coefficient-weighted mean over the flow's paths (the
        coefficients of one path's links sum to one per hop level). ``adaptive`` rows hold
        one representative link per hop level (links of a level share one latency), so
        their plain sum is the path latency.
        """
        safe = np.where(self.links >= 0, self.links, 0)
        per_hop = np.where(self.links >= 0, np.asarray(latency, dtype=np.float64)[safe], 0.0)
        if self.coef is not None and not self.policy.startswith("adaptive"):
            per_hop = per_hop * self.coef
        return per_hop.sum(axis=1)

    def link_load(self, rates: np.ndarray | None = None) -> np.ndarray:
        """float64 ``[num_links]``: sum over flows of rate x coef on every link.

        With ``rates=None`` this counts flows per link (coefficient-weighted).
        """
        rates = np.ones(self.num_flows) if rates is None else rates
        return link_load(self.links, rates, self.num_links, self.coef)

    def matrix(self):
        """The routing matrix as ``jax.experimental.sparse.BCOO`` of shape ``[L, F]``.

        Entry ``(l, f)`` is the fraction of flow ``f`` carried by link ``l`` (1 for single
        paths). ``A @ rates`` gives per-link load.
        """
        import jax.numpy as jnp
        from jax.experimental import sparse

        flow_ids, hop_ids = np.nonzero(self.links >= 0)
        data = (
            np.ones(flow_ids.size, dtype=np.float32)
            if self.coef is None
            else self.coef[flow_ids, hop_ids]
        )
        indices = np.stack([self.links[flow_ids, hop_ids], flow_ids], axis=1).astype(np.int32)
        return sparse.BCOO(
            (jnp.asarray(data), jnp.asarray(indices)), shape=(self.num_links, self.num_flows)
        )

    def __repr__(self) -> str:
        return (
            f"Routes(flows={self.num_flows}, max_hops={self.max_hops}, policy={self.policy!r}, "
            f"multipath={self.coef is not None})"
        )
