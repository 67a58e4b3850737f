"""The cost and power section of the design-review report (:mod:`.build`).

Prices the fabric (:func:`fabricflow.fabric_cost`: network capex and power per tier, the
bill of materials) and the job's work (:func:`fabricflow.work_cost`: GPUs and the job's
share of the network, amortized over the table's lifetime, power at its energy price).
A table that lacks a price the fabric needs gives a section that names the missing key
instead of failing the report.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from fabricflow.errors import SpecError
from fabricflow.fabric.cost import FabricCost, fabric_cost, work_cost
from fabricflow.plots.figures import new_figure, save_figure


def cost_section(fabric, gpu_name: str, gpus: int, result, cost: dict | None = None) -> dict:
    """Report section ``cost``: tables of the bill, the tiers and the work's cost.

    ``result`` is the job's :class:`~fabricflow.workload.step.StepResult`; ``gpus`` its GPU
    count (the network is charged in proportion to the fabric's GPUs it uses).
    """
    started = time.monotonic()
    settings: dict = {"price table": "shipped defaults, the spec's cost section, overrides"}
    try:
        network = fabric_cost(fabric, cost)
        work = work_cost(
            network,
            gpu_name,
            tokens_per_s=result.tokens_per_s,
            model_tflops_per_gpu=result.tflops_per_gpu,
            gpus=gpus,
        )
    except SpecError as error:
        return _section(f"Not priced: {error}", settings, started, tables=[], figures=[])
    currency = network.currency
    settings.update(
        lifetime_years=network.table.lifetime_years,
        power_price_per_kWh=network.table.power_price_per_kWh,
        pue=network.table.pue,
        currency=currency,
    )
    tiers = [
        {"tier": tier, "capex": round(entry["capex"]), "power_kW": entry["power_W"] / 1e3}
        for tier, entry in network.by("tier").items()
    ]
    lines = [
        {
            "part": line.part,
            "tier": line.tier,
            "count": line.count,
            "unit_price": round(line.unit_price),
            "price": round(line.price),
            "power_kW": line.power_W / 1e3,
            # which end of a cable a transceiver sits at, the reach, the breakout
            "detail": line.detail,
        }
        for line in network.lines
    ]
    work_rows = [
        {"item": "network capex (whole fabric)", "value": f"{network.capex:,.0f} {currency}"},
        {"item": "network capex per GPU", "value": f"{network.capex_per_gpu:,.0f} {currency}"},
        {"item": "network power per GPU", "value": f"{network.power_W_per_gpu:,.1f} W"},
        {
            "item": f"GPU capex ({gpus:,} x {gpu_name})",
            "value": f"{work.gpu_capex:,.0f} {currency}",
        },
        {"item": "cost per hour of the job", "value": f"{work.per_hour:,.0f} {currency}"},
        {"item": "cost per million tokens", "value": f"{work.per_million_tokens:,.4f} {currency}"},
        {"item": "cost per PFLOP/s-day", "value": f"{work.per_pflops_day:,.2f} {currency}"},
        {"item": "network share of capex", "value": f"{work.network_capex / work.capex:.1%}"},
    ]
    text = (
        f"Network capex {network.capex:,.0f} {currency} ({network.capex_per_gpu:,.0f} per GPU) "
        f"and power {network.power_W / 1e3:,.1f} kW; the job costs "
        f"{work.per_million_tokens:,.4f} {currency} per million tokens with capex spread "
        f"over {network.table.lifetime_years:g} years and power at "
        f"{network.table.power_price_per_kWh:g} {currency}/kWh x PUE {network.table.pue:g}."
    )
    return _section(text, settings, started, figures=[_tier_figure(network)], tables=[
        {"caption": "Cost of the work", "columns": [("item", ""), ("value", "")], "rows": work_rows},
        {
            "caption": f"Network capex and power per tier ({currency})",
            "columns": [("tier", "tier"), ("capex", "capex"), ("power_kW", "power kW")],
            "rows": tiers,
        },
        {
            "caption": "Bill of materials",
            "columns": [
                ("part", "part"), ("tier", "tier"), ("count", "count"),
                ("unit_price", "unit price"), ("price", "price"), ("power_kW", "power kW"),
                ("detail", "what"),
            ],
            "rows": lines,
        },
    ])  # fmt: skip


def plot_cost_by_tier(network: FabricCost, path: str | Path) -> Path:
    """Bar charts: network capex and power per tier."""
    tiers = network.by("tier")
    names = list(tiers)
    fig = new_figure(figsize=(10, 4.4))
    axes = fig.subplots(1, 2)
    axes[0].bar(names, [tiers[n]["capex"] / 1e6 for n in names], color="tab:blue")
    axes[0].set_ylabel(f"capex (million {network.currency})")
    axes[0].set_title("network capex", fontsize=9)
    axes[1].bar(names, [tiers[n]["power_W"] / 1e3 for n in names], color="tab:orange")
    axes[1].set_ylabel("power (kW)")
    axes[1].set_title("network power", fontsize=9)
    for ax in axes:
        ax.set_xlabel("tier")
        ax.tick_params(axis="x", labelrotation=30 if len(names) > 5 else 0)
    fig.suptitle(
        f"{network.fabric}: {network.capex_per_gpu:,.0f} {network.currency} and "
        f"{network.power_W_per_gpu:,.0f} W of network per GPU",
        fontsize=10,
    )
    # what a tier holds, said once under both panels (a long label per panel overlapped)
    fig.supxlabel(
        "a tier: its switches and the cables up from them; nic: the NICs and the GPU-to-leaf "
        "cables; scale-up: the scale-up switches (NVLink switch trays or in-server)",
        fontsize=8,
    )
    fig.tight_layout()
    return save_figure(fig, path)


def _tier_figure(network: FabricCost) -> dict:
    with tempfile.TemporaryDirectory(prefix="fabricflow-report-") as folder:
        path = os.path.join(folder, "cost.png")
        plot_cost_by_tier(network, path)
        png = Path(path).read_bytes()
    return {"name": "cost_by_tier", "caption": "Network capex and power per tier", "png": png}


def _section(text: str, settings: dict, started: float, *, tables: list, figures: list) -> dict:
    return {
        "id": "cost",
        "title": "Cost and power",
        "text": text,
        "settings": settings,
        "tables": tables,
        "figures": figures,
        "seconds": time.monotonic() - started,
    }
