"""``CCResult``: the outcome of a congestion-control run (numpy arrays, host side)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.parameters import Parameters
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.solve.status import SolverStatus

_PER_ITEM = (
    "rate",
    "delivered",
    "queue",
    "paused",
    "pause_time",
    "flow_pause_time",
    "finish_time",
    "retransmitted",
    "trimmed",
)


@dataclasses.dataclass(frozen=True, eq=False)
class CCResult:
    """Outcome of a run. Arrays are numpy; a batch adds a leading ``[batch]`` axis.

    Attributes:
        cc: name of the rate law (``dcqcn``, ``hpcc``, ...).
        time: ``[R]`` s, time of each record.
        rate: ``[R, F]`` sending rate of each flow, bytes/s (DCQCN: R_C).
        delivered: ``[R, F]`` cumulative delivered bytes.
        queue: ``[R, L]`` egress queue per link, bytes.
        paused: ``[R, L]`` bool, PFC pause state of each link (its egress stopped).
        pause_time: ``[L]`` s each link spent paused (exact, every step).
        flow_pause_time: ``[F]`` s each flow spent with a paused link on its path.
        finish_time: ``[F]`` s completion time (``inf``: not finished).
        retransmitted: ``[F]`` bytes of each flow trimmed in the fabric and sent again
            (0 without trimming).
        trimmed: ``[L]`` bytes trimmed at each link's egress (0 without trimming).
        law_state: name -> ``[F]`` final state of the law (DCQCN: ``rate``,
            ``target_rate``, ``alpha``).
        status: :class:`~fabricflow.solve.status.SolverStatus` (``CONVERGED``: the run reached
            ``duration`` with finite values; ``NONFINITE``: a NaN or inf appeared); int32
            ``[batch]`` codes for a batch.
        links, capacity, size, start, delay: the problem (``[F, H]`` -1 padded, ``[L]``
            (or ``[batch, L]``) bytes/s, ``[F]`` bytes, ``[F]`` s, ``[F]`` s feedback delay).
        prev_links: ``[F, H]`` ingress link of each hop (-1 for hop 0).
        dt, duration: s. params, pfc_params, pfc_mode: what ran; trim: whether switch
            egresses trimmed.
    """

    cc: str
    time: np.ndarray
    rate: np.ndarray
    delivered: np.ndarray
    queue: np.ndarray
    paused: np.ndarray
    pause_time: np.ndarray
    flow_pause_time: np.ndarray
    finish_time: np.ndarray
    law_state: dict
    status: SolverStatus | np.ndarray
    links: np.ndarray
    prev_links: np.ndarray
    capacity: np.ndarray
    size: np.ndarray
    start: np.ndarray
    delay: np.ndarray
    dt: float
    duration: float
    params: Parameters
    pfc_params: PFCParams
    pfc_mode: str
    retransmitted: np.ndarray
    trimmed: np.ndarray
    trim: bool = False

    @property
    def num_flows(self) -> int:
        return int(self.links.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[-1])

    @property
    def alpha(self) -> np.ndarray:
        """DCQCN's final ``alpha`` ``[F]`` (AttributeError for another law)."""
        return self._state("alpha")

    @property
    def target_rate(self) -> np.ndarray:
        """DCQCN's final target rate R_T ``[F]``, bytes/s (AttributeError for another law)."""
        return self._state("target_rate")

    def _state(self, name: str) -> np.ndarray:
        if name not in self.law_state:
            raise AttributeError(
                f"{self.cc} has no {name!r} state; it has {sorted(self.law_state)}"
            )
        return self.law_state[name]

    def mean_rate(self, since: float | None = None) -> np.ndarray:
        """Time-averaged delivered throughput per flow (bytes/s) from ``since`` (default:
        half the duration) to the end, from the cumulative delivered bytes (exact)."""
        since = self.duration / 2 if since is None else since
        index = int(np.searchsorted(self.time, since, side="left"))
        index = min(index, self.time.shape[0] - 1)
        if index == self.time.shape[0] - 1:
            raise SpecError("since", f"must be earlier than the last record {self.time[-1]:.3g} s")
        delivered = self.delivered.astype(np.float64)
        span = self.time[-1] - self.time[index]
        return (delivered[..., -1, :] - delivered[..., index, :]) / span

    @property
    def batched(self) -> bool:
        """True when the result holds a batch (leading ``[batch]`` axis)."""
        return self.rate.ndim == 3

    def batch_item(self, index: int) -> CCResult:
        """Run ``index`` of a batch, as a non-batched result."""
        if not self.batched:
            raise SpecError("index", "batch_item needs a batched result (a parameter sweep)")
        size = self.rate.shape[0]
        if not -size <= index < size:
            raise SpecError("index", f"must lie in 0..{size - 1}, got {index}")
        pick = {name: getattr(self, name)[index] for name in _PER_ITEM}
        return dataclasses.replace(
            self,
            status=SolverStatus(int(np.asarray(self.status)[index])),
            law_state={name: value[index] for name, value in self.law_state.items()},
            capacity=self.capacity[index] if self.capacity.ndim == 2 else self.capacity,
            params=self.params.item(index) if self.params.batch_size() else self.params,
            pfc_params=self.pfc_params.item(index)
            if self.pfc_params.batch_size()
            else self.pfc_params,
            **pick,
        )


__all__ = ["CCResult"]
