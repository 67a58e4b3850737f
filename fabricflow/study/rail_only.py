"""Study: the rail-only argument on our models (Wang et al., 2023; docs/references.md §7).

Three 51.2T Ethernet fabrics of 400G per GPU, 8-GPU HGX nodes:

- ``rail-optimized``: 3-tier rail-optimized Clos, 1:1 (``3t/1:1/rail/1p/400G/su8/roce``);
- ``rail-only``: one 2-tier 1:1 tree per rail, cross-rail traffic over NVLink
  (``2t/1:1/rail-only/1p/400G/su8/roce``);
- ``oversubscribed 1:7``: the rail-optimized Clos with 1:7 at the spine, Meta's choice
  above its pods (``3t/7:1/rail/1p/400G/su8/roce``).

Each fabric takes the fewest tiers that hold the GPU count (2 to 4) and is built for whole
pods; for each GPU count the bill of materials is priced (network capex and power per GPU
built, and the capex above the NICs: switches, their optics and cables); for a
Llama-3-class dense job and an MoE job the layout optimizer finds the best layout on the
rail-optimized fabric (``layout_budget_s``), and that layout is timed on all three, so the
step times compare fabrics, not searches.
"""

from __future__ import annotations

import time

import numpy as np
import xarray as xr

from fabricflow.design.space import design_spec
from fabricflow.errors import SpecError
from fabricflow.fabric.cost import fabric_cost
from fabricflow.fabric.spec import build_fabric
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.plots.figures import new_figure, save_figure
from fabricflow.workload.step import step_time

FABRICS = {
    "rail-optimized": "3t/1:1/rail/1p/400G/su8/roce",
    "rail-only": "2t/1:1/rail-only/1p/400G/su8/roce",
    "oversubscribed 1:7": "3t/7:1/rail/1p/400G/su8/roce",
}
JOBS = {  # model, global batch, sequence length, layout knobs pinned in the search
    "dense": ("llama3-405b", 2048, 8192, {"tp": 8}),
    "moe": ("mixtral-8x22b", 4096, 4096, {"tp": 8}),
}


def rail_only_study(
    sizes=(8192, 16384, 32768),
    step_gpus: int = 16384,
    *,
    jobs: dict | None = None,
    gpu: str = "h100-sxm",
    layout_budget_s: float = 20.0,
) -> xr.Dataset:
    """Network capex and power per GPU for every (fabric, size); step time of every
    (fabric, job) at ``step_gpus`` GPUs with the layout found on the rail-optimized one."""
    started = time.monotonic()
    jobs = jobs or JOBS
    names = list(FABRICS)
    capex = np.zeros((len(names), len(sizes)))
    power = np.zeros_like(capex)
    switches = np.zeros_like(capex)
    optics = np.zeros_like(capex)
    above_nic = np.zeros_like(capex)
    built = np.zeros_like(capex)
    for i, name in enumerate(names):
        for j, size in enumerate(sizes):
            fabric = build_fabric(fewest_tiers(FABRICS[name], size))
            cost = fabric_cost(fabric)
            per = fabric.num_gpus  # per GPU the fabric was built for (whole pods)
            capex[i, j] = cost.capex / per
            power[i, j] = cost.power_W / per
            above_nic[i, j] = (cost.capex - cost.by("tier")["nic"]["capex"]) / per
            switches[i, j] = cost.bom.count(category="switch")
            optics[i, j] = cost.bom.count(category="transceiver")
            built[i, j] = per
    fabrics = {n: build_fabric(fewest_tiers(FABRICS[n], step_gpus)) for n in names}
    step = np.full((len(names), len(jobs)), np.nan)
    layouts = []
    for k, (model, batch, seq, fixed) in enumerate(jobs.values()):
        search = optimize_layout(
            model, gpu, fabrics["rail-optimized"], gpus=step_gpus, global_batch=batch,
            seq_len=seq, fixed=fixed, top_k=1, budget_s=layout_budget_s,
        )  # fmt: skip
        kwargs = search.best_kwargs
        layouts.append(str(kwargs["layout"]))
        for i, name in enumerate(names):
            result = step_time(model, gpu, kwargs["layout"], fabrics[name],
                               **{k2: v for k2, v in kwargs.items() if k2 != "layout"})  # fmt: skip
            step[i, k] = result.step_time_s
    return xr.Dataset(
        {
            "network_capex_per_gpu": (("fabric", "gpus"), capex),
            "network_power_W_per_gpu": (("fabric", "gpus"), power),
            "network_capex_above_nic_per_gpu": (("fabric", "gpus"), above_nic),
            "built_gpus": (("fabric", "gpus"), built),
            "switches": (("fabric", "gpus"), switches),
            "transceivers": (("fabric", "gpus"), optics),
            "step_time_s": (("fabric", "job"), step),
            "layout": (("job",), np.array(layouts, dtype=object)),
        },
        coords={"fabric": names, "gpus": list(sizes), "job": list(jobs)},
        attrs={
            "step_gpus": step_gpus,
            "gpu": gpu,
            "models": ", ".join(f"{j}: {m[0]}" for j, m in jobs.items()),
            "designs": ", ".join(f"{n}: {c}" for n, c in FABRICS.items()),
            "seconds": time.monotonic() - started,
        },
    )


def fewest_tiers(code: str, gpus: int) -> dict:
    """The spec of design ``code`` with the fewest tiers (from 2) that hold ``gpus``."""
    rest = code.split("/", 1)[1]
    for tiers in range(2, 5):
        try:
            return design_spec(f"{tiers}t/{rest}", gpus)
        except SpecError:
            continue
    return design_spec(code, gpus)  # raises, naming why


def key_numbers(data: xr.Dataset) -> dict:
    """Savings of rail-only and 1:7 against rail-optimized (cost, power, %) per size, and
    the step-time change per job (%)."""
    base = data.sel(fabric="rail-optimized")
    out: dict = {}
    for other in ("rail-only", "oversubscribed 1:7"):
        alt = data.sel(fabric=other)
        out[other] = {
            "capex_saving_pct": {
                int(g): float(100 * (1 - alt.network_capex_per_gpu.sel(gpus=g)
                                     / base.network_capex_per_gpu.sel(gpus=g)))
                for g in data.gpus.values
            },
            "capex_above_nic_saving_pct": {
                int(g): float(100 * (1 - alt.network_capex_above_nic_per_gpu.sel(gpus=g)
                                     / base.network_capex_above_nic_per_gpu.sel(gpus=g)))
                for g in data.gpus.values
            },
            "power_saving_pct": {
                int(g): float(100 * (1 - alt.network_power_W_per_gpu.sel(gpus=g)
                                     / base.network_power_W_per_gpu.sel(gpus=g)))
                for g in data.gpus.values
            },
            "step_time_change_pct": {
                str(j): float(100 * (alt.step_time_s.sel(job=j) / base.step_time_s.sel(job=j) - 1))
                for j in data.job.values
            },
        }  # fmt: skip
    return out


def plot_rail_only(data: xr.Dataset, path, thumbnail: bool = False):
    """Network capex and power per GPU by GPU count, and step time per job, per fabric."""
    fig = new_figure(figsize=(4, 3) if thumbnail else (14, 4))
    axes = fig.subplots(1, 3)
    sizes = [int(g) for g in data.gpus.values]
    width = 0.8 / data.sizes["fabric"]
    x = np.arange(len(sizes))
    for i, name in enumerate(data.fabric.values):
        row = data.sel(fabric=name)
        axes[0].bar(x + i * width, row.network_capex_per_gpu, width, label=str(name))
        axes[1].bar(x + i * width, row.network_power_W_per_gpu, width, label=str(name))
        axes[2].bar(np.arange(data.sizes["job"]) + i * width, row.step_time_s, width,
                    label=str(name))  # fmt: skip
    for ax, label in zip(axes[:2], ("network capex per GPU (USD)", "network power per GPU (W)"),
                         strict=True):  # fmt: skip
        ax.set_xticks(x + width, [f"{s:,}" for s in sizes])
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
    axes[2].set_xticks(np.arange(data.sizes["job"]) + width, [str(j) for j in data.job.values])
    axes[2].set_ylabel(f"step time at {data.attrs['step_gpus']:,} GPUs (s)")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)
