"""Cost and power of a fabric (network capex and watts, per tier and per GPU) and the cost
of the work done on it (per delivered training token and per PFLOP/s-day).

:func:`fabric_cost` prices every line of the bill of materials
(:func:`~fabricflow.fabric.bom.bill_of_materials`) from the cost table
(:mod:`~fabricflow.fabric.cost_table`). :func:`work_cost` adds the GPUs (their share of
the server), spreads capex evenly over ``lifetime_years`` and bills power (GPUs and
network, times ``pue``) at ``power_price_per_kWh``:

    dollars per hour = (gpu capex + network capex) / (lifetime_years * 8766 h)
                       + (gpu power + network power) * pue * power price
    dollars per token = dollars per hour / (3600 * tokens per second)

Example::

    >>> cost = fabric_cost(load_fabric("dgx-h100-superpod"))
    >>> round(cost.capex_per_gpu)       # network dollars per GPU, default table
    6548
"""

from __future__ import annotations

import dataclasses
import math

from fabricflow.errors import SpecError
from fabricflow.fabric.bom import BillOfMaterials, bill_of_materials
from fabricflow.fabric.cost_table import CostTable, cost_table, positive_number
from fabricflow.schema import finite_result

HOURS_PER_YEAR = 8766.0  # 365.25 days


@dataclasses.dataclass(frozen=True)
class CostLine:
    """One priced line of the bill: ``count`` x ``unit_price`` (currency) and ``unit_power_W``."""

    category: str
    part: str
    tier: str
    count: int
    unit_price: float
    unit_power_W: float
    detail: str = ""

    @property
    def price(self) -> float:
        return self.count * self.unit_price

    @property
    def power_W(self) -> float:
        return self.count * self.unit_power_W


@dataclasses.dataclass(frozen=True)
class FabricCost:
    """Network capex (``currency``) and power (W) of a fabric, with its priced lines."""

    fabric: str
    gpus: int
    currency: str
    lines: tuple[CostLine, ...]
    bom: BillOfMaterials
    table: CostTable

    @property
    def capex(self) -> float:
        return float(sum(line.price for line in self.lines))

    @property
    def power_W(self) -> float:
        return float(sum(line.power_W for line in self.lines))

    @property
    def capex_per_gpu(self) -> float:
        return self.capex / self.gpus

    @property
    def power_W_per_gpu(self) -> float:
        return self.power_W / self.gpus

    def by(self, key: str) -> dict[str, dict[str, float]]:
        """Capex and power grouped by ``"tier"``, ``"category"`` or ``"part"``."""
        out: dict[str, dict[str, float]] = {}
        for line in self.lines:
            entry = out.setdefault(getattr(line, key), {"capex": 0.0, "power_W": 0.0})
            entry["capex"] += line.price
            entry["power_W"] += line.power_W
        return out

    def to_dict(self) -> dict:
        return {
            "fabric": self.fabric,
            "gpus": self.gpus,
            "currency": self.currency,
            "capex": self.capex,
            "power_W": self.power_W,
            "capex_per_gpu": self.capex_per_gpu,
            "power_W_per_gpu": self.power_W_per_gpu,
            "per_tier": self.by("tier"),
            "per_category": self.by("category"),
            "lines": [
                {**dataclasses.asdict(line), "price": line.price, "power_W": line.power_W}
                for line in self.lines
            ],
        }


def fabric_cost(fabric, cost: dict | None = None) -> FabricCost:
    """Network capex and power of ``fabric``: switches, NICs, scale-up switches beyond the
    server, transceivers and cables, priced from the default table, the fabric spec's
    ``cost:`` section and ``cost`` (overrides, same layout), in that order.

    Raises:
        SpecError: a part the fabric needs has no price (naming ``cost.<section>.<part>``),
            or a price, power or lifetime is negative or not finite.
    """
    table = cost_table(fabric, cost)
    bom = bill_of_materials(fabric, table)
    lines = []
    for item in bom.items:
        part = table.part(item.section, item.part, f"{item.count:,} x {item.tier}")
        lines.append(
            CostLine(
                item.category,
                item.part,
                item.tier,
                item.count,
                part.price,
                part.power_W,
                item.detail + (f" (included in the {part.note})" if part.note else ""),
            )
        )
        key = f"cost.{item.section}.{item.part}"
        finite_result(lines[-1].price, f"{key}.price", f"{item.count:,} x its price")
        finite_result(lines[-1].power_W, f"{key}.power_W", f"{item.count:,} x its power")
    result = FabricCost(fabric.name, fabric.num_gpus, table.currency, tuple(lines), bom, table)
    finite_result(result.capex, "cost", "the network capex (the sum of the priced lines)")
    finite_result(result.power_W, "cost", "the network power (the sum of the priced lines)")
    return result


@dataclasses.dataclass(frozen=True)
class WorkCost:
    """The cost of training at ``tokens_per_s`` on ``gpus`` GPUs of ``gpu`` and a network.

    Capex in currency, power in W (IT load; the bill multiplies by ``pue``), rates per hour.
    """

    gpu: str
    gpus: int
    currency: str
    gpu_capex: float
    network_capex: float
    gpu_power_W: float
    network_power_W: float
    lifetime_years: float
    power_price_per_kWh: float
    pue: float
    tokens_per_s: float
    model_tflops_per_gpu: float

    @property
    def capex(self) -> float:
        return self.gpu_capex + self.network_capex

    @property
    def power_W(self) -> float:
        return self.gpu_power_W + self.network_power_W

    @property
    def capex_per_hour(self) -> float:
        return self.capex / (self.lifetime_years * HOURS_PER_YEAR)

    @property
    def energy_per_hour(self) -> float:
        return self.power_W * self.pue / 1000.0 * self.power_price_per_kWh

    @property
    def per_hour(self) -> float:
        """Total cost per hour of running the cluster (amortized capex + energy)."""
        return self.capex_per_hour + self.energy_per_hour

    @property
    def per_million_tokens(self) -> float:
        return self.per_hour / (3600.0 * self.tokens_per_s) * 1e6

    @property
    def tokens_per_dollar(self) -> float:
        return 3600.0 * self.tokens_per_s / self.per_hour

    @property
    def per_pflops_day(self) -> float:
        """Cost of one PFLOP/s-day of model FLOPs (the MFU numerator)."""
        pflops = self.model_tflops_per_gpu * self.gpus / 1000.0
        return self.per_hour * 24.0 / pflops if pflops > 0 else math.inf

    def to_dict(self) -> dict:
        fields = dataclasses.asdict(self)
        for name in (
            "capex",
            "power_W",
            "capex_per_hour",
            "energy_per_hour",
            "per_hour",
            "per_million_tokens",
            "tokens_per_dollar",
            "per_pflops_day",
        ):
            fields[name] = getattr(self, name)
        return fields


def work_cost(
    network: FabricCost,
    gpu: str,
    *,
    tokens_per_s: float,
    model_tflops_per_gpu: float = 0.0,
    gpus: int | None = None,
    whole_network: bool = False,
) -> WorkCost:
    """Cost of the work: ``gpus`` GPUs of preset ``gpu`` (default: every GPU of the
    fabric) and their share ``gpus / fabric GPUs`` of ``network`` (a :class:`FabricCost`),
    delivering ``tokens_per_s`` training tokens
    per second (``StepResult.tokens_per_s`` summed over jobs) and ``model_tflops_per_gpu``
    model TFLOP/s per GPU (``StepResult.tflops_per_gpu``), with the lifetime, energy price
    and PUE of the network's cost table. ``whole_network``: charge all of the network to
    these GPUs (a fabric built for them, spare ports included) instead of their share.

    Raises:
        SpecError: no ``cost.gpus.<gpu>`` entry, or a rate that is not finite and > 0.
    """
    table = network.table
    count = network.gpus if gpus is None else gpus
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= network.gpus:
        raise SpecError(
            "gpus", f"must be an integer in [1, {network.gpus}] (the fabric's GPUs), got {count!r}"
        )
    rate = positive_number(tokens_per_s, "tokens_per_s")
    if model_tflops_per_gpu:
        positive_number(model_tflops_per_gpu, "model_tflops_per_gpu")
    part = table.part("gpus", gpu, f"{count:,} GPUs")
    share = 1.0 if whole_network else count / network.gpus
    result = WorkCost(
        gpu=gpu,
        gpus=count,
        currency=table.currency,
        gpu_capex=part.price * count,
        network_capex=network.capex * share,
        gpu_power_W=part.power_W * count,
        network_power_W=network.power_W * share,
        lifetime_years=table.lifetime_years,
        power_price_per_kWh=table.power_price_per_kWh,
        pue=table.pue,
        tokens_per_s=rate,
        model_tflops_per_gpu=float(model_tflops_per_gpu),
    )
    finite_result(result.gpu_capex, f"cost.gpus.{gpu}.price", f"{count:,} GPUs x their price")
    finite_result(result.gpu_power_W, f"cost.gpus.{gpu}.power_W", f"{count:,} GPUs x their power")
    finite_result(result.capex, "cost", "the capex of GPUs and network")
    finite_result(result.per_hour, "cost", "the cost per hour (capex over the lifetime + energy)")
    return result
