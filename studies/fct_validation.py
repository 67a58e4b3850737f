"""Packet fidelity against the discrete-event packet reference: the table of docs/fct.md.

    python studies/fct_validation.py K SEED [SEED ...]

Builds the k-ary fat-tree (400 Gb/s, 1 us links), a 2 MB random permutation per seed,
ECMP routes shared by both models, and prints one JSON line per seed: FCT percentiles
(us, to the last ACK) of the packet reference (``tests/packet_reference.py``), of the
packet fidelity and of the fluid fidelity, their errors, and per-flow ratios. The
reference is a Python event loop: k=16 takes about half a minute, k=32 a quarter hour.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from packet_reference import simulate_packets  # noqa: E402

import fabricflow as ff  # noqa: E402
from fabricflow.fabric.spec import load_fat_tree  # noqa: E402
from fabricflow.solve.packet.overheads import reverse_links  # noqa: E402
from fabricflow.traffic.patterns import permutation_flows  # noqa: E402

QUANTILES = [50, 90, 99, 100]


def compare(k: int, seed: int, size: float = 2e6) -> dict:
    fabric = load_fat_tree(k)
    src, dst = permutation_flows(fabric.num_gpus, seed)
    routes = ff.route(fabric, src, dst, seed=seed)
    began = time.perf_counter()
    _, acked = simulate_packets(
        routes.links,
        fabric.capacity,
        fabric.latency,
        np.full(routes.num_flows, size),
        reverse=reverse_links(fabric.link_src, fabric.link_dst),
    )
    reference_s = time.perf_counter() - began
    out = {"k": k, "seed": seed, "hosts": fabric.num_gpus, "reference_s": reference_s}
    out["reference_us"] = np.percentile(acked * 1e6, QUANTILES).round(2).tolist()
    for fidelity in ("packet", "fluid"):
        times = ff.flow_completion_times(fabric, routes, size, fidelity=fidelity)
        ratio = times.fct / acked
        out[f"{fidelity}_us"] = np.percentile(times.fct * 1e6, QUANTILES).round(2).tolist()
        error = np.percentile(times.fct, QUANTILES) / np.percentile(acked, QUANTILES) - 1
        out[f"{fidelity}_error_pct"] = (error * 100).round(2).tolist()
        out[f"{fidelity}_per_flow_ratio_min_median_max"] = [
            float(ratio.min()),
            float(np.median(ratio)),
            float(ratio.max()),
        ]
        out[f"{fidelity}_flows_within_5pct"] = float(np.mean(np.abs(ratio - 1) < 0.05))
    return out


if __name__ == "__main__":
    k = int(sys.argv[1])
    for seed in sys.argv[2:] or ["0"]:
        print(json.dumps(compare(k, int(seed))), flush=True)
