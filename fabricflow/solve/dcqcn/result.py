"""``DCQCNResult``: the outcome of a DCQCN/PFC run (numpy arrays, host side)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import SpecError
from ..status import Status
from .params import DCQCNParams, PFCParams


@dataclasses.dataclass(frozen=True, eq=False)
class DCQCNResult:
    """Outcome of a DCQCN run. Arrays are numpy; a parameter batch adds a leading axis.

    Attributes:
        time: ``[R]`` s, time of each record.
        rate: ``[R, F]`` DCQCN current rate R_C, bytes/s.
        delivered: ``[R, F]`` cumulative delivered bytes.
        queue: ``[R, L]`` egress queue per link, bytes.
        paused: ``[R, L]`` bool, PFC pause state of each link (its egress stopped).
        pause_time: ``[L]`` s each link spent paused (exact, every step).
        flow_pause_time: ``[F]`` s each flow spent with a paused link on its path.
        finish_time: ``[F]`` s completion time (``inf``: not finished).
        alpha, target_rate: ``[F]`` final alpha and R_T.
        status: :class:`~fabricflow.solve.status.Status` (``CONVERGED``: the run reached
            ``duration`` with finite values; ``NONFINITE``: a NaN or inf appeared); int32
            ``[batch]`` codes for a parameter batch.
        links, capacity, size, start, delay: the problem (``[F, H]`` -1 padded, ``[L]``
            bytes/s, ``[F]`` bytes, ``[F]`` s, ``[F]`` s feedback delay).
        prev_links: ``[F, H]`` ingress link of each hop (-1 for hop 0).
        dt, duration: s. params, pfc_params, pfc_mode: what ran.
    """

    time: np.ndarray
    rate: np.ndarray
    delivered: np.ndarray
    queue: np.ndarray
    paused: np.ndarray
    pause_time: np.ndarray
    flow_pause_time: np.ndarray
    finish_time: np.ndarray
    alpha: np.ndarray
    target_rate: np.ndarray
    status: Status | np.ndarray
    links: np.ndarray
    prev_links: np.ndarray
    capacity: np.ndarray
    size: np.ndarray
    start: np.ndarray
    delay: np.ndarray
    dt: float
    duration: float
    params: DCQCNParams
    pfc_params: PFCParams
    pfc_mode: str

    @property
    def num_flows(self) -> int:
        return int(self.links.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[0])

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
        """True when the result holds a parameter batch (leading ``[batch]`` axis)."""
        return self.rate.ndim == 3

    def batch_item(self, index: int) -> DCQCNResult:
        """Run ``index`` of a parameter batch, as a non-batched result."""
        if not self.batched:
            raise SpecError("index", "batch_item needs a batched result (a parameter sweep)")
        size = self.rate.shape[0]
        if not -size <= index < size:
            raise SpecError("index", f"must lie in 0..{size - 1}, got {index}")
        pick = {
            name: getattr(self, name)[index]
            for name in (
                "rate",
                "delivered",
                "queue",
                "paused",
                "pause_time",
                "flow_pause_time",
                "finish_time",
                "alpha",
                "target_rate",
            )
        }
        params = DCQCNParams(
            **{
                k: float(np.asarray(v)[index]) if np.ndim(v) else v
                for k, v in self.params.as_dict().items()
            }
        )
        pfc_params = PFCParams(
            **{
                k: float(np.asarray(v)[index]) if np.ndim(v) else v
                for k, v in self.pfc_params.as_dict().items()
            }
        )
        return dataclasses.replace(
            self,
            status=Status(int(np.asarray(self.status)[index])),
            params=params,
            pfc_params=pfc_params,
            **pick,
        )
