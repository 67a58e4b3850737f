"""Exceptions raised by fabricflow.

Every error that comes from bad input names the offending field and, where the set is
finite, the allowed values, so that a user can fix a spec without reading our code.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import numpy as np

# How close (difflib ratio, 0..1) an allowed value must be to be suggested, and how many.
SUGGEST_CUTOFF = 0.6
SUGGEST_LIMIT = 3
# ... and within this much of the best match's similarity.
SUGGEST_SPREAD = 0.15


def close_matches(value: object, allowed: Iterable[object]) -> list[str]:
    """The allowed values closest to ``value``, closest first: a case variant first, then
    the only allowed value it is a prefix of, then by similarity (difflib's ratio,
    ignoring case, ties broken by case), at most :data:`SUGGEST_LIMIT`, none below
    :data:`SUGGEST_CUTOFF` or far below the best."""
    if value is None:
        return []
    text = str(value)
    names = [n for n in dict.fromkeys(str(a) for a in allowed) if n != text]
    low = text.lower()
    prefixed = [n for n in names if low and n.lower().startswith(low)]

    def score(name: str) -> tuple[bool, bool, float, float]:
        return (
            name.lower() == low,
            len(prefixed) == 1 and name == prefixed[0],
            difflib.SequenceMatcher(None, low, name.lower()).ratio(),
            difflib.SequenceMatcher(None, text, name).ratio(),
        )

    ranked = sorted(((score(n), n) for n in names), reverse=True)
    if not ranked:
        return []
    best = ranked[0][0][2]
    return [
        name
        for key, name in ranked
        if key[0] or key[1] or (key[2] >= SUGGEST_CUTOFF and key[2] >= best - SUGGEST_SPREAD)
    ][:SUGGEST_LIMIT]


def did_you_mean(value: object, allowed: Iterable[object]) -> str:
    """``"; did you mean 'llama3-8b'?"`` (closest first, up to three) when some allowed
    value is close to ``value``, else ``""``: the suffix every error that lists the
    allowed values adds after naming them."""
    matches = close_matches(value, allowed)
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(m) for m in matches) + "?"


class FabricflowError(Exception):
    """Base class of all fabricflow errors."""


class SpecError(FabricflowError, ValueError):
    """A user-supplied spec (YAML, CLI flag, function argument) is invalid.

    ``field`` is the dotted path of the offending field (``scale_out.tiers[1].radix``).
    With ``value`` (what was given) and ``allowed`` (the valid choices), the message ends
    with the closest choices (:func:`did_you_mean`), closest first.
    """

    def __init__(
        self,
        field: str,
        message: str,
        *,
        value: object = None,
        allowed: Iterable[object] | None = None,
    ):
        self.field = field
        if allowed is not None:
            message += did_you_mean(value, allowed)
        super().__init__(f"{field}: {message}" if field else message)


class UnitWarning(UserWarning):
    """A quantity that parses but lies far from any real part (a NIC of 400 bytes/s, a
    cable latency of 600 s): most likely a unit left out. The command line prints it as
    one ``warning:`` line on stderr."""


class RoutingError(FabricflowError, ValueError):
    """Flows cannot be routed (unreachable pairs, unsupported policy, too large)."""


class SolverError(FabricflowError, RuntimeError):
    """A solver finished with a bad status (did not converge, non-finite values)."""


class MemoryBudgetError(FabricflowError, MemoryError):
    """A requested allocation would exceed the memory budget; says how large and why."""


class OutputError(FabricflowError, OSError):
    """An output file or folder cannot be written (read-only, full disk, not a folder)."""


def check_flag(value, field: str) -> bool:
    """A boolean option: ``True``/``False`` or a numpy bool, else a SpecError naming ``field``.

    Truthy strings (``"no"``), ints and ``None`` are refused: ``bool("no")`` is ``True``.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SpecError(field, f"must be True or False, got {value!r}")
