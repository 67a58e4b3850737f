"""The price and power table: the shipped defaults (``prices.yaml``), a fabric spec's
``cost:`` section and per-run overrides, merged in that order and checked.

Layout of the table (every key of the defaults may be overridden; mappings merge key by
key, so ``{"switches": {"qm9700": {"price": 30000}}}`` changes one price)::

    currency: USD
    switches: {NAME: {family, generation, cages, cage_bandwidth, price, power_W}}
    nics: {NAME: {families, generation, ports, port_speed, price, power_W}}
    transceivers: {MEDIA-BANDWIDTH: {price, power_W}}     # e.g. multimode-800G
    cables: {KIND-BANDWIDTH: {price, power_W}}            # dac-800G, fiber-multimode
    scale_up: {in-server: {...}, nvlink-switch-tray: {ports, links_per_gpu, ...}}
    gpus: {GPU: {price, power_W}}                         # per GPU, server share
    switch_models: {TIER: SWITCH}   # pin a tier's switch (default: smallest that fits)
    nic_model: NIC                  # pin the NIC (default: fewest cards that fit)
    reach: {LINK_KIND: rack | row | hall | campus}       # override the reach model
    media: {REACH: dac | acc | aoc | multimode | singlemode | singlemode-fr}
    lifetime_years: 4
    power_price_per_kWh: 0.08
    pue: 1.2

Prices are in ``currency`` per unit, power in watts per unit. Prices and power must be
finite and ``>= 0`` (an explicit 0 is allowed: the HGX baseboard's NVSwitches (``in-server``) are in the
server price); lifetime and power price must be finite and positive, ``pue >= 1``. A part
the fabric needs and the table lacks is an error naming the key to set
(:meth:`CostTable.part`), never a silent zero.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from functools import cache
from importlib import resources
from typing import Any

from fabricflow import schema as sr
from fabricflow.errors import SpecError
from fabricflow.files import parse_structured, read_structured

TABLE_KEYS = (
    "currency",
    "switches",
    "nics",
    "transceivers",
    "cables",
    "scale_up",
    "gpus",
    "switch_models",
    "nic_model",
    "reach",
    "media",
    "lifetime_years",
    "power_price_per_kWh",
    "pue",
)
SWITCH_KEYS = ("family", "generation", "cages", "cage_bandwidth", "price", "power_W")
NIC_KEYS = ("families", "generation", "ports", "port_speed", "price", "power_W")
PART_KEYS = ("price", "power_W", "included_in", "ports", "links_per_gpu")
FAMILIES = ("infiniband", "ethernet", "slingshot")
REACHES = ("rack", "row", "hall", "campus")
MEDIA = ("dac", "acc", "aoc", "multimode", "singlemode", "singlemode-fr")
# transport protocol -> switch family (ICI fabrics have no switches)
FAMILY_OF_PROTOCOL = {
    "infiniband": "infiniband",
    "rocev2": "ethernet",
    "slingshot": "slingshot",
    "uet": "ethernet",
}


@dataclasses.dataclass(frozen=True)
class Part:
    """One priced item: ``price`` (currency per unit) and ``power_W`` (watts per unit)."""

    key: str  # dotted table key, e.g. "transceivers.multimode-800G"
    price: float
    power_W: float
    note: str = ""


@dataclasses.dataclass(frozen=True)
class SwitchModel:
    """A switch product: ``cages`` front-panel cages of ``cage_Bps`` bytes/s each."""

    name: str
    family: str
    generation: str
    cages: int
    cage_Bps: float
    part: Part

    @property
    def capacity_Bps(self) -> float:
        """Switching capacity, one direction (bytes/s)."""
        return self.cages * self.cage_Bps


@dataclasses.dataclass(frozen=True)
class NicModel:
    """A network adapter: ``ports`` ports of ``port_Bps`` bytes/s each."""

    name: str
    families: tuple[str, ...]
    generation: str
    ports: int
    port_Bps: float
    part: Part


@dataclasses.dataclass(frozen=True)
class CostTable:
    """A checked price and power table (see the module docstring)."""

    currency: str
    switches: dict[str, SwitchModel]
    nics: dict[str, NicModel]
    parts: dict[str, dict]  # section -> name -> raw mapping (checked when used)
    switch_models: dict[str, str]
    nic_model: str | None
    reach: dict[str, str]
    media: dict[str, str]
    lifetime_years: float
    power_price_per_kWh: float
    pue: float
    raw: dict

    def part(self, section: str, name: str, used_by: str) -> Part:
        """The priced part ``section.name``, or a SpecError naming the key to set."""
        if section == "switches" and name in self.switches:
            return self.switches[name].part
        if section == "nics" and name in self.nics:
            return self.nics[name].part
        entries = self.parts.get(section, {})
        if name not in entries or entries[name] is None:
            raise SpecError(
                f"cost.{section}.{name}",
                f"no price for {name!r}, which {used_by} needs; set cost.{section}.{name}: "
                "{price: ..., power_W: ...} in the fabric's cost section or the cost file "
                f"(known {section}: {sorted(entries)})",
            )
        return parse_part(entries[name], f"cost.{section}.{name}")

    def switch(self, name: str, used_by: str) -> SwitchModel:
        if name not in self.switches:
            raise SpecError(
                f"cost.switches.{name}",
                f"unknown switch {name!r} for {used_by}; define cost.switches.{name} or use "
                f"one of {sorted(self.switches)}",
            )
        return self.switches[name]


def default_table() -> dict:
    """The shipped table (``fabricflow/fabric/prices.yaml``) as a fresh mapping."""
    return copy.deepcopy(_default_raw())


@cache
def _default_raw() -> dict:
    text = (resources.files("fabricflow") / "fabric" / "prices.yaml").read_text("utf-8")
    return parse_structured(text, what="cost table", source="prices.yaml")


def read_cost_file(path) -> dict:
    """The override mapping of a cost file (``--cost-file``), checked against the table.

    The file holds the table's keys either at top level or under one ``cost:`` key (the
    layout of a fabric spec's section), not both: a file with both would leave it unclear
    which applies. The merged table is checked at once (:func:`parse_table`: unknown keys
    with the closest, numbers finite and in range, names among their choices), so a bad
    file is refused before any fabric is built; errors name the file and the key.

    Raises:
        SpecError: unreadable, not a mapping, both layouts, or a bad entry.
    """
    data = read_structured(path, what="cost-file")
    if not isinstance(data, dict):
        raise SpecError("cost-file", f"{path} must hold a mapping at top level")
    if "cost" in data:
        others = sorted(str(k) for k in data if k != "cost")
        if others:
            raise SpecError(
                "cost-file",
                f"{path} has both a 'cost:' section and top-level table keys {others}; write "
                "the table either under 'cost:' (as in a fabric spec) or at top level, not both",
            )
        data = data["cost"]
        if not isinstance(data, dict):
            raise SpecError("cost-file", f"{path}: 'cost:' must be a mapping, got {data!r}")
    try:
        parse_table(merge(default_table(), data))
    except SpecError as error:
        raise SpecError(
            error.field, f"{str(error).removeprefix(error.field + ': ')} (in {path})"
        ) from None
    return data


def merge(base: dict, override: dict | None, field: str = "cost") -> dict:
    """``base`` updated by ``override``: nested mappings merge key by key."""
    if override is None:
        return base
    if not isinstance(override, dict):
        raise SpecError(field, f"expected a mapping, got {type(override).__name__}")
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value, f"{field}.{key}")
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def cost_table(fabric=None, cost: dict | None = None) -> CostTable:
    """The table for ``fabric``: defaults, then its spec's ``cost:`` section, then ``cost``."""
    raw = default_table()
    if fabric is not None:
        raw = merge(raw, (fabric.meta.get("spec") or {}).get("cost"))
    return parse_table(merge(raw, cost))


def parse_table(raw: dict) -> CostTable:
    """Check a merged table mapping (errors name the ``cost.*`` field)."""
    top = sr.Section(raw, "cost", TABLE_KEYS)
    switches = {
        name: _switch(name, sr.Section(entry, f"cost.switches.{name}", SWITCH_KEYS))
        for name, entry in _mapping(top, "switches").items()
        if entry is not None
    }
    nics = {
        name: _nic(name, sr.Section(entry, f"cost.nics.{name}", NIC_KEYS))
        for name, entry in _mapping(top, "nics").items()
        if entry is not None
    }
    parts = {key: _mapping(top, key) for key in ("transceivers", "cables", "scale_up", "gpus")}
    reach = {
        str(k): sr.choice(*REACHES)(v, f"cost.reach.{k}") for k, v in _mapping(top, "reach").items()
    }
    media = {
        str(k): sr.choice(*MEDIA)(v, f"cost.media.{k}") for k, v in _mapping(top, "media").items()
    }
    unknown = sorted(set(media) - set(REACHES))
    if unknown:
        raise SpecError(
            f"cost.media.{unknown[0]}",
            f"unknown reach {unknown[0]!r}; reaches: {list(REACHES)}",
            value=unknown[0],
            allowed=REACHES,
        )
    switch_models = {
        str(k): sr.text(v, f"cost.switch_models.{k}")
        for k, v in _mapping(top, "switch_models").items()
    }
    for tier, name in switch_models.items():
        if name not in switches:
            raise SpecError(
                f"cost.switch_models.{tier}",
                f"unknown switch {name!r}; define it under cost.switches or use one of "
                f"{sorted(switches)}",
            )
    nic_model = top.get("nic_model", sr.text, None)
    if nic_model is not None and nic_model not in nics:
        raise SpecError("cost.nic_model", f"unknown NIC {nic_model!r}; one of {sorted(nics)}")
    lifetime = positive_number(top.raw("lifetime_years"), "cost.lifetime_years")
    power_price = positive_number(top.raw("power_price_per_kWh"), "cost.power_price_per_kWh")
    pue = positive_number(top.raw("pue"), "cost.pue")
    if pue < 1:
        raise SpecError("cost.pue", f"power usage effectiveness is >= 1, got {pue!r}")
    return CostTable(
        currency=top.get("currency", sr.text, "USD"),
        switches=switches,
        nics=nics,
        parts=parts,
        switch_models=switch_models,
        nic_model=nic_model,
        reach=reach,
        media=media,
        lifetime_years=lifetime,
        power_price_per_kWh=power_price,
        pue=pue,
        raw=raw,
    )


def _mapping(top: sr.Section, key: str) -> dict:
    value = top.raw(key, {})
    if not isinstance(value, dict):
        raise SpecError(top.field(key), f"expected a mapping, got {value!r}")
    return value


def nonnegative_number(value: Any, field: str) -> float:
    """A finite number ``>= 0`` (prices, power)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number >= 0, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise SpecError(field, f"must be finite and >= 0, got {value!r}")
    return float(value)


def positive_number(value: Any, field: str) -> float:
    """A finite number ``> 0`` (lifetimes, energy prices)."""
    number = nonnegative_number(value, field)
    if number == 0:
        raise SpecError(field, f"must be > 0, got {value!r}")
    return number


def parse_part(entry: Any, field: str) -> Part:
    section = sr.Section(entry, field, PART_KEYS)
    return Part(
        key=field.removeprefix("cost."),
        price=nonnegative_number(section.raw("price"), section.field("price")),
        power_W=nonnegative_number(section.raw("power_W"), section.field("power_W")),
        note=section.get("included_in", sr.text, ""),
    )


def _price_part(section: sr.Section) -> Part:
    return Part(
        key=section.path.removeprefix("cost."),
        price=nonnegative_number(section.raw("price"), section.field("price")),
        power_W=nonnegative_number(section.raw("power_W"), section.field("power_W")),
    )


def _switch(name: str, section: sr.Section) -> SwitchModel:
    return SwitchModel(
        name=name,
        family=section.get("family", sr.choice(*FAMILIES)),
        generation=section.get("generation", sr.text, name),
        cages=section.get("cages", sr.positive_int),
        cage_Bps=section.get("cage_bandwidth", sr.bandwidth),
        part=_price_part(section),
    )


def _nic(name: str, section: sr.Section) -> NicModel:
    families = section.get("families", sr.text_list)
    for family in families:
        sr.choice(*FAMILIES)(family, section.field("families"))
    return NicModel(
        name=name,
        families=tuple(families),
        generation=section.get("generation", sr.text, name),
        ports=section.get("ports", sr.positive_int),
        port_Bps=section.get("port_speed", sr.bandwidth),
        part=_price_part(section),
    )
