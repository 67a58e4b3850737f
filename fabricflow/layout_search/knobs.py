"""Knobs of the layout search, the default space, and parsing of ``--fix`` / ``--space``.

A knob is a :class:`~fabricflow.workload.layout.Layout` field (read from the dataclass, so a
field added to ``Layout`` can be pinned or searched without a change here), or one of the
step options ``order``, ``placement``, ``routing`` (the collective model's routing policy, e.g.
``ecmp`` or ``optimized``) and ``algorithm_<dim>`` (the collective algorithm of
dimension ``tp``, ``cp``, ``ep``, ``pp`` or ``dp``). ``dp`` follows from the GPU count;
``global_batch`` and ``seq_len`` are arguments of the search, not knobs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from fabricflow.assignments import key_values
from fabricflow.collective.comm import DIMENSION_OPS, check_algorithms
from fabricflow.collective.timing import ROUTINGS
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric
from fabricflow.workload import placement as _placement
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec

# Set by the search's arguments, never by fixed/space.
ARGUMENT_FIELDS = ("global_batch", "seq_len")
STEP_KNOBS = ("order", "placement", "routing")
ALGORITHM_KNOBS = tuple(f"algorithm_{dim}" for dim in DIMENSION_OPS)
# Knobs that change neither compute nor memory, only how communication is timed or hidden:
# they multiply the candidates without multiplying the compute-model work.
NETWORK_KNOBS = (
    "tp_overlap",
    "dp_overlap",
    "pp_overlap",
    "ep_overlap",
    *STEP_KNOBS,
    *ALGORITHM_KNOBS,
)

# Rank orders of the default space (fastest-varying first). Each keeps a different
# dimension inside the scale-up domain, the rail / leaf, or the pod: Megatron's default
# (DP inside, PP outermost), Megatron's tp-pp-dp mapping and Llama 3's [TP, CP, PP, DP]
# (PP inside, DP outermost), PP right after TP, DP right after TP, CP before TP, and EP
# before CP (expert all-to-all inside the scale-up domain).
DEFAULT_ORDERS = (
    "tp-cp-ep-dp-pp",
    "tp-cp-ep-pp-dp",
    "tp-pp-cp-ep-dp",
    "tp-dp-cp-ep-pp",
    "cp-tp-ep-dp-pp",
    "tp-ep-cp-dp-pp",
)
# Placements a job gets rather than chooses: ``scattered`` is the servers a busy scheduler
# hands out (seeded at random). Searching it by default would recommend a random draw and
# solve a group structure that no other candidate shares; ask for it with
# ``space={"placement": ["contiguous", "scattered"]}`` to see what fragmentation costs.
NOT_CHOSEN_PLACEMENTS = ("scattered",)
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def layout_fields() -> dict[str, dataclasses.Field]:
    """Layout fields that are knobs (all but the search's arguments)."""
    return {f.name: f for f in dataclasses.fields(Layout) if f.name not in ARGUMENT_FIELDS}


def known_knobs() -> list[str]:
    return [*layout_fields(), *STEP_KNOBS, *ALGORITHM_KNOBS]


def placements() -> tuple[str, ...]:
    """Placement names the workload offers now (``topology-aware`` once it exists)."""
    return tuple(_placement.PLACEMENTS)


def default_value(knob: str) -> Any:
    """The value a knob takes when neither pinned nor searched."""
    fields = layout_fields()
    if knob in fields:
        return fields[knob].default
    # routing "auto": what the fabric's transport does (adaptive spraying or per-flow ECMP)
    return {"order": "tp-cp-ep-dp-pp", "placement": "deployed"}.get(knob, "auto")


def check_knob(knob: str, field: str) -> None:
    if knob not in known_knobs():
        raise SpecError(
            field,
            f"unknown knob {knob!r}; one of {known_knobs()}",
            value=knob,
            allowed=known_knobs(),
        )


def parse_value(knob: str, text: Any, field: str = "fix") -> Any:
    """``text`` (a CLI word or a Python value) as the type of ``knob``; SpecError otherwise."""
    check_knob(knob, field)
    fields = layout_fields()
    where = f"{field}.{knob}"
    kind: Any = type(default_value(knob)) if knob in fields else str
    if kind is bool:
        if isinstance(text, (bool, np.bool_)):
            return bool(text)
        word = str(text).strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise SpecError(where, f"must be true or false, got {text!r}")
    if kind is int:
        if isinstance(text, (bool, np.bool_)):
            raise SpecError(where, f"must be an integer, got {text!r}")
        try:
            value = int(str(text).strip())
        except ValueError:
            raise SpecError(where, f"must be an integer, got {text!r}") from None
        return value
    if kind is float:
        try:
            return float(str(text).strip())
        except ValueError:
            raise SpecError(where, f"must be a number, got {text!r}") from None
    word = str(text).strip()
    if knob == "order":
        _placement.parse_order(word)  # SpecError naming 'order' and the rule
        return word.lower()
    if knob == "placement" and word not in placements():
        raise SpecError(where, f"unknown placement {word!r}; one of {list(placements())}")
    if knob == "routing":
        if word not in ROUTINGS:
            raise SpecError(where, f"unknown routing {word!r}; one of {list(ROUTINGS)}")
    if knob.startswith("algorithm_"):
        dim = knob[len("algorithm_") :]
        try:
            return check_algorithms({dim: word})[dim]
        except SpecError as error:
            message = str(error).split(": ", 1)[-1]
            raise SpecError(where, message) from None
    return word


def parse_assignments(items: list[str] | None, *, many: bool, field: str) -> dict:
    """``["tp=8", "zero=1"]`` (``--fix``) or ``["tp=4,8"]`` (``--space``) as a dict.

    Split by :func:`fabricflow.assignments.key_values`: a knob given twice with different
    values is refused (``--space`` twice is ambiguous: union or replacement?).
    """
    example = "KNOB=VALUES (e.g. tp=4,8)" if many else "KNOB=VALUE (e.g. tp=8)"
    out: dict = {}
    for knob, text in key_values(items, field, example=example, lists=many).items():
        check_knob(knob, field)
        if many:
            words = [w for w in text.split(",") if w.strip()]
            if not words:
                raise SpecError(f"{field} {knob}", "needs at least one value")
            out[knob] = [parse_value(knob, w, field) for w in words]
        else:
            out[knob] = parse_value(knob, text, field)
    return out


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(int(math.log2(max(limit, 1))) + 1)]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_space(
    model: ModelSpec, fabric: Fabric, *, gpus: int, global_batch: int, seq_len: int
) -> dict[str, list]:
    """The knobs and values searched when no ``space`` is given (see docs/optimize.md).

    Sizes are the values a Megatron-style run can take: TP up to the scale-up domain and
    dividing the (KV) heads, CP powers of two keeping >= 1,024 tokens per rank, EP dividing
    the experts, PP powers of two dividing the layers (or layers + 2), interleaving that
    divides them per stage, micro-batches 1-16. Overlap switches are searched both ways
    (off only loses in the model, but a user may want to see by how much); the collective
    algorithm stays ``auto``, which already takes the fastest algorithm per message size
    and so dominates any fixed choice.
    """
    domain = int(np.bincount(np.asarray(fabric.gpu_domain)).max()) if fabric.num_gpus else 1
    heads = [model.num_heads] + ([] if model.is_mla else [model.num_kv_heads])
    tp = [t for t in _powers_of_two(min(domain, gpus)) if all(h % t == 0 for h in heads)]
    cp = [c for c in _powers_of_two(min(16, gpus)) if c == 1 or seq_len % (2 * c) == 0]
    cp = [c for c in cp if seq_len // c >= 1024 or c == 1]
    ep = [1]
    if model.is_moe:
        ep = [
            e
            for e in _powers_of_two(min(model.num_experts, 64, gpus))
            if model.num_experts % e == 0
        ]
    layers = model.num_layers
    pp = [p for p in _powers_of_two(min(layers, gpus)) if layers % p == 0 or (layers + 2) % p == 0]
    vpp = sorted(set(_divisors(layers)) | set(_divisors(layers + 2)))
    vpp = [v for v in vpp if v <= 64]
    space: dict[str, list] = {
        "tp": tp,
        "cp": cp,
        "ep": ep,
        "pp": pp,
        "vpp": vpp,
        "micro_batch": [b for b in (1, 2, 4, 8, 16) if b <= global_batch],
        "recompute": ["none", "selective", "full"],
        "zero": [0, 1, 2, 3],
        "sequence_parallel": [False, True],
        "tp_overlap": [True, False],
        "dp_overlap": [True, False],
        "order": list(DEFAULT_ORDERS),
        "placement": [p for p in placements() if p not in NOT_CHOSEN_PLACEMENTS],
    }
    if domain < _placement.DOMAIN_ALIGN:  # no domain keeps spares: deployed is contiguous
        space["placement"].remove("deployed")
    if model.is_moe:
        space["ep_overlap"] = [True, False]
    return space


def resolve_space(
    model: ModelSpec,
    fabric: Fabric,
    *,
    gpus: int,
    global_batch: int,
    seq_len: int,
    precision: str,
    fixed: dict | None,
    space: dict | None,
    defaults: dict | None = None,
) -> tuple[dict[str, list], dict[str, Any]]:
    """(searched knob -> values, every other knob -> its single value).

    ``space`` given: exactly its product is searched; knobs not in it take their ``fixed``
    value or their default (``defaults``, a software stack's choices, over
    :func:`default_value`). No ``space``: the default space, with ``fixed`` knobs pinned.
    SpecError for an unknown knob, a value of the wrong type, an empty list, or a pin that
    contradicts ``space`` or ``precision``.
    """
    if fixed is not None and not isinstance(fixed, dict):
        raise SpecError("fixed", f"expected a dict knob -> value (e.g. {{'tp': 8}}), got {fixed!r}")
    fixed = dict(fixed or {})
    for knob in fixed:
        check_knob(knob, "fixed")
    fixed = {k: parse_value(k, v, "fixed") for k, v in fixed.items()}
    if "precision" in fixed and fixed["precision"] != precision:
        raise SpecError(
            "fixed.precision",
            f"pins {fixed['precision']!r} but precision={precision!r}; give one of them",
        )
    fixed["precision"] = precision
    if space is not None:
        if not isinstance(space, dict):
            raise SpecError("space", f"expected a dict knob -> list of values, got {space!r}")
        if not space:
            raise SpecError(
                "space",
                "is empty; name at least one knob and its values (e.g. {'tp': [4, 8]}), "
                "or leave it out (None) to search the default space",
            )
        searched = {}
        for knob, values in space.items():
            check_knob(knob, "space")
            if not isinstance(values, (list, tuple, range, np.ndarray)) or (
                isinstance(values, np.ndarray) and values.ndim != 1
            ):
                raise SpecError(
                    f"space.{knob}",
                    f"must be a list of values, got {values!r}; write [{values!r}] to search "
                    "one value, or pin it with fixed=",
                )
            values = list(values)
            if not values:
                raise SpecError(f"space.{knob}", "is empty; give at least one value")
            parsed = list(dict.fromkeys(parse_value(knob, v, "space") for v in values))
            if knob in fixed and fixed[knob] not in parsed:
                raise SpecError(
                    f"fixed.{knob}",
                    f"pins {fixed[knob]!r}, which space.{knob}={parsed} excludes; "
                    "pin it or search it, not both",
                )
            searched[knob] = parsed if knob not in fixed else [fixed[knob]]
    else:
        searched = default_space(
            model, fabric, gpus=gpus, global_batch=global_batch, seq_len=seq_len
        )
        for knob in list(searched):
            if knob in fixed:
                searched[knob] = [fixed[knob]]
    # dp follows from the GPU count: a pinned or searched dp only filters the sizes.
    chosen = {k: v for k, v in (defaults or {}).items() if k != "precision"}
    single = {
        k: chosen.get(k, default_value(k)) for k in known_knobs() if k not in searched and k != "dp"
    }
    single.update({k: v for k, v in fixed.items() if k not in searched})
    return searched, single


def product_size(searched: dict[str, list]) -> int:
    return int(np.prod([len(v) for v in searched.values()], dtype=np.float64))


def iter_product(searched: dict[str, list]):
    """Every assignment of the searched knobs (for brute force in tests; small spaces)."""
    keys = list(searched)
    for combo in itertools.product(*(searched[k] for k in keys)):
        yield dict(zip(keys, combo, strict=True))
