"""PFC ingress-buffer parameters (one lossless priority), SI units.

Defaults (docs/references.md §3): a static XOFF of 100 KB per ingress queue with a 10 KB
hysteresis (XON = XOFF - hysteresis); for dynamic thresholds, XOFF = 1/8 of the switch's
free shared buffer of 12 MB (the ``alpha`` of the dynamic-threshold MMU of the HPCC ns-3
simulator, ``switch-mmu.cc``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.parameters import Parameters, register


@register
@dataclasses.dataclass(frozen=True)
class PFCParams(Parameters):
    """PFC thresholds of every ingress queue.

    Attributes:
        xoff: static XOFF threshold per ingress queue, bytes: pause the upstream link once
            the ingress queue holds more than this.
        hysteresis: XON = XOFF - hysteresis, bytes (resume once below).
        dynamic_alpha: with dynamic thresholds, XOFF = dynamic_alpha x (free shared
            buffer of the switch); ignored for static thresholds.
        shared_buffer: shared buffer per switch for the dynamic threshold, bytes.
    """

    FIELDS: ClassVar = {
        "xoff": ("size", "> 0"),
        "hysteresis": ("size", ">= 0"),
        "dynamic_alpha": ("number", "> 0"),
        "shared_buffer": ("size", "> 0"),
    }
    PREFIX: ClassVar = "pfc"
    NAME: ClassVar = "PFC"

    xoff: float = 100e3
    hysteresis: float = 10e3
    dynamic_alpha: float = 1.0 / 8.0
    shared_buffer: float = 12e6

    def check_relations(self, values: dict[str, np.ndarray]) -> None:
        if np.any(values["hysteresis"] > values["xoff"]):
            raise SpecError(
                "pfc.hysteresis",
                "must lie in [0, xoff] bytes (XON = xoff - hysteresis would be negative), "
                f"got hysteresis={self.hysteresis}, xoff={self.xoff}",
            )


PFC_MODES = ("off", "static", "dynamic")


def resolve_pfc_mode(pfc) -> str:
    """``off`` / ``static`` / ``dynamic`` from a mode name, ``on`` or a bool."""
    if pfc is True or pfc == "on":
        return "static"
    if pfc is False or pfc is None:
        return "off"
    if pfc not in PFC_MODES:
        raise SpecError("pfc", f"unknown PFC mode {pfc!r}; choose on, off, static or dynamic")
    return pfc
