"""Exceptions raised by fabricflow.

Every error that comes from bad input names the offending field and, where the set is
finite, the allowed values, so that a user can fix a spec without reading our code.
"""

from __future__ import annotations

import numpy as np


class FabricflowError(Exception):
    """Base class of all fabricflow errors."""


class SpecError(FabricflowError, ValueError):
    """A user-supplied spec (YAML, CLI flag, function argument) is invalid.

    ``field`` is the dotted path of the offending field (``scale_out.tiers[1].radix``).
    """

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


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
