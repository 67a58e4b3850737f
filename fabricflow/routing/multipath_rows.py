"""Row-wise merging of repeated link entries in multipath route arrays (vectorized)."""

from __future__ import annotations

import numpy as np


def merge_row_entries(links: np.ndarray, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge entries of the same link within each row, summing their coefficients.

    Args:
        links: int ``[F, K]`` link ids, ``-1`` = padding (anywhere in the row).
        coef: float ``[F, K]`` fraction of the flow on each entry.

    Returns:
        ``(links, coef)`` of shape ``[F, K']`` with each link at most once per row, sorted by
        link id, padding (``-1``, coef 0) at the end of each row, ``K'`` = the most distinct
        links of any row.
    """
    num_flows, width = links.shape
    if num_flows == 0 or width == 0:
        return links.astype(np.int32), coef.astype(np.float32)
    # Padding sorts last if we map -1 to a large key.
    keyed = np.where(links >= 0, links.astype(np.int64), np.iinfo(np.int64).max)
    order = np.argsort(keyed, axis=1, kind="stable")
    sorted_links = np.take_along_axis(keyed, order, axis=1)
    sorted_coef = np.take_along_axis(coef.astype(np.float64), order, axis=1)
    valid = sorted_links != np.iinfo(np.int64).max
    new_run = np.ones_like(valid)
    new_run[:, 1:] = sorted_links[:, 1:] != sorted_links[:, :-1]
    position = np.cumsum(new_run & valid, axis=1) - 1
    out_width = int(position.max(initial=-1)) + 1
    rows = np.broadcast_to(np.arange(num_flows)[:, None], links.shape)
    flat = (rows * out_width + position)[valid]
    out_coef = np.bincount(flat, weights=sorted_coef[valid], minlength=num_flows * out_width)
    out_links = np.full(num_flows * out_width, -1, dtype=np.int64)
    out_links[flat] = sorted_links[valid]
    return (
        out_links.reshape(num_flows, out_width).astype(np.int32),
        out_coef.reshape(num_flows, out_width).astype(np.float32),
    )
