"""A searched layout as numbers, and back: how a design search carries each design's best
layout through a sweep store (whose metrics are floats) to time it on the other designs.

A *candidate* is the flat mapping knob -> value of the knobs a job's layout search may
choose (``tp``, ``order``, ...; :func:`candidate_of` reads it from a search's
``best_kwargs``). The knobs coded for a job are those the default space searches and
those its ``space`` names, less those its ``fixed`` pins (equal on every design). Numbers
and booleans are coded as themselves; a text value as its index in the job's ``space``
list of that knob, or else in the knob's full vocabulary (every rank order, placement or
recompute mode), which depends on neither the fabric nor the machine.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from fabricflow.errors import SpecError
from fabricflow.layout_search import knobs
from fabricflow.workload.layout import RECOMPUTE
from fabricflow.workload.placement import DIMENSIONS, PLACEMENTS

# Knobs the default space may search (knobs.default_space); dp follows from the GPU count
# but is coded so that a candidate reads whole.
SEARCHED_KNOBS = (
    "tp", "cp", "ep", "pp", "vpp", "dp", "micro_batch", "recompute", "zero",
    "sequence_parallel", "tp_overlap", "dp_overlap", "ep_overlap", "order", "placement",
)  # fmt: skip
VOCABULARY: dict[str, tuple] = {
    "order": tuple(sorted("-".join(p) for p in itertools.permutations(DIMENSIONS))),
    "placement": tuple(PLACEMENTS),
    "recompute": tuple(RECOMPUTE),
}


def coded_knobs(job: dict) -> list[str]:
    """The knobs coded for ``job`` (a design job mapping: optional ``space``, ``fixed``)."""
    space, fixed = job.get("space") or {}, job.get("fixed") or {}
    coded = [k for k in SEARCHED_KNOBS if k not in fixed or k == "dp"]
    coded += [k for k in space if k not in coded and k not in fixed]
    return coded


def metric_names(prefix: str, job: dict) -> list[str]:
    """Metric names of ``job``'s coded candidate: ``<prefix><knob>``."""
    return [f"{prefix}{knob}" for knob in coded_knobs(job)]


def candidate_of(kwargs: dict) -> dict:
    """knob -> value of a search's ``best_kwargs`` (``layout``, ``order``, ...)."""
    out = {f.name: getattr(kwargs["layout"], f.name) for f in dataclasses.fields(kwargs["layout"])}
    out["order"] = kwargs["order"]
    out["placement"] = kwargs["placement"]
    out["routing"] = kwargs.get("routing", "auto")
    for dim, algorithm in kwargs.get("algorithms", {}).items():
        out[f"algorithm_{dim}"] = algorithm
    for knob in knobs.known_knobs():
        out.setdefault(knob, knobs.default_value(knob))
    return out


def _vocabulary(knob: str, job: dict) -> list:
    space = job.get("space") or {}
    if knob in space:
        return [knobs.parse_value(knob, v, "space") for v in space[knob]]
    if knob in VOCABULARY:
        return list(VOCABULARY[knob])
    raise SpecError(f"space.{knob}", f"a text knob the design search cannot code: {knob!r}")


def encode(candidate: dict, job: dict, prefix: str) -> dict[str, float]:
    """``<prefix><knob>`` -> float of ``candidate``'s coded knobs."""
    out = {}
    for knob in coded_knobs(job):
        value = candidate[knob]
        if isinstance(value, str):
            value = _vocabulary(knob, job).index(value)
        out[f"{prefix}{knob}"] = float(value)
    return out


def decode(metrics: dict, job: dict, prefix: str) -> dict:
    """The candidate of :func:`encode`'s ``metrics`` (knob -> value, typed as the knob),
    with the knobs ``job`` pins (or leaves at their default) filled in."""
    out: dict = {k: knobs.default_value(k) for k in SEARCHED_KNOBS if k != "dp"}
    out.update({k: knobs.parse_value(k, v, "fixed") for k, v in (job.get("fixed") or {}).items()})
    for knob in coded_knobs(job):
        number = float(metrics[f"{prefix}{knob}"])
        if math.isnan(number):
            raise SpecError("layout", f"no coded value of {knob!r}")
        if knob in VOCABULARY or knob in (job.get("space") or {}):
            kind = type(knobs.default_value(knob)) if knob in knobs.layout_fields() else str
            if kind is str:
                out[knob] = _vocabulary(knob, job)[int(number)]
                continue
        default = knobs.default_value(knob)
        if isinstance(default, bool):
            out[knob] = bool(number)
        elif isinstance(default, int):
            out[knob] = int(number)
        else:
            out[knob] = number
    return out


def describe(candidate: dict, *, wrap: bool = False, where: bool = True) -> str:
    """A complete line (``wrap``: a few short lines) of a candidate: sizes, micro-batch,
    recompute, ZeRO stage, the switches that differ from their default, rank order and
    placement (``where=False``: without these two, for a table that shows them apart).
    Two candidates that differ in any searched knob read differently."""
    lay = candidate
    sizes = f"TP{lay['tp']} CP{lay['cp']} PP{lay['pp']}"
    sizes += f"x{lay['vpp']}" if lay.get("vpp", 1) > 1 else ""
    sizes += f" EP{lay['ep']}" if lay.get("ep", 1) > 1 else ""
    sizes += f" DP{lay['dp']}"
    memory = f"mb{lay['micro_batch']} {lay['recompute']} ZeRO-{lay['zero']}"
    switches = []
    for knob, short in (("sequence_parallel", "sp"), ("tp_overlap", "tp-overlap"),
                        ("dp_overlap", "dp-overlap"), ("pp_overlap", "pp-overlap"),
                        ("ep_overlap", "ep-overlap")):  # fmt: skip
        if knob in lay and lay[knob] != knobs.default_value(knob):
            switches.append(("" if lay[knob] else "no-") + short)
    parts = [sizes, memory, ",".join(switches)]
    parts += [lay["order"], lay["placement"]] if where else []
    for knob in ("routing", *knobs.ALGORITHM_KNOBS):
        if lay.get(knob, "auto") != "auto":
            parts.append(f"{knob}={lay[knob]}")
    parts = [p for p in parts if p]
    return "\n".join(parts) if wrap else " ".join(parts)


def differences(a: dict, b: dict) -> list[str]:
    """``knob a->b`` for each knob whose value differs between candidates ``a`` and ``b``."""
    return [f"{k} {a[k]}->{b[k]}" for k in a if k in b and a[k] != b[k]]
