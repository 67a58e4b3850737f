"""InfiniBand, RoCEv2 and Ultra Ethernet on the same jobs: incast, MoE all-to-all, step time.

    python studies/uet_compare.py OUT [--fast]

(a) A 64-to-1 incast of 2 MB flows with a long-lived victim flow at 800 Gb/s (base RTT
8 us): RoCEv2 (DCQCN, PFC on) against Ultra Ethernet (NSCC or RCCC, trimming at one BDP,
PFC off), in the congestion-control fluid: completion times, the victim's throughput,
pauses, queue and retransmitted bytes. (b) The MoE all-to-all of expert-parallel groups
of 64 GPUs (8 nodes each, 256 MB per GPU) over all 8,192 GPUs of ``ue-800g-clos``, the
transport switched between ``uet`` (spraying), ``rocev2`` (per-flow ECMP) and
``infiniband`` (adaptive routing) on the same switches. (c) The step time of
Llama-3-405B and DeepSeek-V3 on 16,384 H100s, each transport on its own 3-tier 800G
rail-optimized design (``fabricflow design``'s: InfiniBand on 144-port, Ethernet on
64-port switches) with its capex and power. (d) NVL72 racks against 1,024-accelerator
UALink pods for Qwen3-235B-A22B on 4,096 GB200s (full run only: the UALink pod's
collectives take about 3 CPU minutes and 18 GB; the whole run 205 CPU s). Writes ``OUT/uet_compare.json`` and
``OUT/uet_compare.png``. ``--fast``: (a) with 8 senders and (b) only (tests).
"""

from __future__ import annotations

import json
import time

import numpy as np

from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.study.outputs import parse_study_args

LINE = 800e9 / 8
BASE_RTT = 8e-6


def incast_study(senders: int) -> dict:
    """(a): per transport, completion times, victim rate, pauses, queue, retransmits."""
    from fabricflow.dynamics.congestion import simulate_cc
    from fabricflow.dynamics.scenarios import incast
    from fabricflow.solve.cc.nscc import nscc_params

    sc = incast(senders, bandwidth=LINE)
    size = np.append(np.full(senders, 2e6), np.inf)  # the victim is long-lived
    bdp = BASE_RTT * LINE
    runs = {
        "rocev2 (DCQCN + PFC)": {"cc": "dcqcn", "pfc": "static"},
        "uet (NSCC + trimming)": {"cc": "nscc", "params": nscc_params(BASE_RTT, LINE), "trim": bdp},
        "uet (RCCC + trimming)": {"cc": "rccc", "trim": bdp},
    }
    out = {}
    for name, options in runs.items():
        res = simulate_cc(
            sc.fabric,
            sc.routes,
            size=size,
            duration=2e-3 * senders / 64 + 0.5e-3,
            dt=1e-7,
            extra_delay=0.0,
            records=1000,
            **options,
        )
        incast_ids = sc.roles["incast"]
        finish = res.finish_time[incast_ids]
        done = float(np.max(finish))
        busy = res.time <= done
        victim = sc.roles["victim"][0]
        delivered = res.delivered[:, victim].astype(np.float64)
        victim_rate = np.interp(done, res.time, delivered) / done
        out[name] = {
            "fct_p50_us": float(np.percentile(finish, 50) * 1e6),
            "fct_p99_us": float(np.percentile(finish, 99) * 1e6),
            "victim_throughput_of_line": float(victim_rate / LINE),
            "queue_p99_bytes": float(np.percentile(res.queue[busy, sc.bottleneck], 99)),
            "most_paused_link_fraction": float(res.pause_time.max() / res.duration),
            "retransmitted_bytes": float(res.retransmitted[incast_ids].sum()),
        }
    return out


def alltoall_study() -> dict:
    """(b): the EP all-to-all's time per transport on the same 8,192-GPU fabric."""
    import fabricflow as ff
    from fabricflow.collective.timing import collective_time

    out = {}
    for protocol in ("uet", "rocev2", "infiniband"):
        fabric = ff.load_fabric(
            "ue-800g-clos",
            transport={"protocol": protocol, "adaptive_routing": protocol != "rocev2"},
        )
        groups = [list(range(base, base + 64)) for base in range(0, fabric.num_gpus, 64)]
        out[protocol] = collective_time(fabric, "all-to-all", groups, 256e6).time_s
    return out


def step_study() -> dict:
    """(c): step time, capex and power of each transport's 16k-GPU 800G design."""
    import fabricflow as ff
    from fabricflow.design.space import design_spec
    from fabricflow.fabric.cost import fabric_cost
    from fabricflow.workload.layout import Layout

    layouts = {
        "llama3-405b": Layout(
            tp=8, pp=16, dp=128, vpp=8, micro_batch=1, global_batch=2048, seq_len=8192,
            recompute="full",
        ),
        "deepseek-v3": Layout(
            tp=1, pp=16, ep=64, dp=1024, micro_batch=1, global_batch=16384, seq_len=4096,
            recompute="full", zero=1,
        ),
    }  # fmt: skip
    out = {}
    for transport in ("ib", "roce", "uet"):
        fabric = ff.build_fabric(design_spec(f"3t/1:1/rail/1p/800G/su8/{transport}", 16384))
        cost = fabric_cost(fabric)
        entry = {
            "fabric_gpus": fabric.num_gpus,
            "network_capex_per_gpu": cost.capex_per_gpu,
            "network_power_W_per_gpu": cost.power_W_per_gpu,
        }
        for model, layout in layouts.items():
            entry[f"{model}_step_s"] = ff.step_time(model, "h100-sxm", layout, fabric).step_time_s
        out[transport] = entry
    return out


def pods_study() -> dict:
    """(d): Qwen3-235B-A22B on NVL72 racks and on 1,024-accelerator UALink pods."""
    import fabricflow as ff
    from fabricflow.workload.layout import Layout

    layout = Layout(
        tp=1, pp=4, ep=64, dp=1024, micro_batch=1, global_batch=4096, seq_len=4096,
        recompute="full", zero=1,
    )  # fmt: skip
    out = {}
    for name, placement in (("gb200-nvl72-superpod", "domain-aligned"), ("ualink-pod-1024", "contiguous")):  # fmt: skip
        result = ff.step_time(
            "qwen3-235b-a22b", "gb200", layout, ff.load_fabric(name), placement=placement
        )
        out[name] = {"step_s": result.step_time_s, "ep_s": result.breakdown["ep"]}
    return out


def _figure(numbers: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    incast = numbers["incast"]
    names = list(incast)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].bar(range(len(names)), [incast[n]["fct_p99_us"] for n in names], color="C0")
    axes[0].set_ylabel("incast p99 completion (us)")
    axes[1].bar(range(len(names)), [incast[n]["victim_throughput_of_line"] for n in names])
    axes[1].set_ylabel("victim throughput / line rate")
    for ax in axes[:2]:
        ax.set_xticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=7)
    a2a = numbers["alltoall"]
    axes[2].bar(list(a2a), [v * 1e3 for v in a2a.values()], color="C2")
    axes[2].set_ylabel("EP all-to-all, 8,192 GPUs (ms)")
    fig.suptitle("RoCEv2 vs Ultra Ethernet (64-to-1 incast at 800G) and the MoE all-to-all")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out, *, fast: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    began = time.process_time()
    numbers = {"incast": incast_study(8 if fast else 64), "alltoall": alltoall_study()}
    if not fast:
        numbers["step"] = step_study()
        numbers["pods"] = pods_study()
    numbers["cpu_seconds"] = time.process_time() - began
    _figure(numbers, out / "uet_compare.png")
    (out / "uet_compare.json").write_text(json.dumps(numbers, indent=1))
    return numbers


def main(argv: list[str] | None = None) -> int:
    args = parse_study_args(__doc__, argv, fast_help="8-to-1 incast and the all-to-all (tests)")
    enable_persistent_cache()  # reruns load the compiled solvers instead of compiling
    print(json.dumps(run(args.out, fast=args.fast)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
