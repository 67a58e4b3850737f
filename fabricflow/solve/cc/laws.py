"""The registry of rate laws: a plain dict, built here explicitly (importing registers
nothing), and :func:`resolve_law`, which turns a name into a law with a clear error."""

from __future__ import annotations

from fabricflow.errors import SpecError
from fabricflow.solve.cc.dcqcn import DCQCN
from fabricflow.solve.cc.hpcc import HPCC
from fabricflow.solve.cc.law import RateLaw
from fabricflow.solve.cc.nscc import Nscc
from fabricflow.solve.cc.predictive import Predictive
from fabricflow.solve.cc.rccc import Rccc
from fabricflow.solve.cc.swift import Swift
from fabricflow.solve.cc.timely import Timely

#: name -> law instance, in the order the CLI and the studies list them.
LAWS: dict[str, RateLaw] = {
    law.name: law for law in (DCQCN(), HPCC(), Timely(), Swift(), Predictive(), Nscc(), Rccc())
}

#: The names of :data:`LAWS`.
CC_NAMES = tuple(LAWS)


def resolve_law(cc) -> RateLaw:
    """The law named ``cc`` (one of :data:`CC_NAMES`), or ``cc`` itself if it is a law."""
    if isinstance(cc, RateLaw):
        return cc
    if isinstance(cc, str) and cc.lower() in LAWS:
        return LAWS[cc.lower()]
    raise SpecError("cc", f"unknown congestion control {cc!r}; choose one of {list(LAWS)}")


__all__ = ["CC_NAMES", "LAWS", "resolve_law"]
