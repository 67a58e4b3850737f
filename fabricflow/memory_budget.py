"""One memory policy for every large allocation: estimate first, refuse with the size.

Builders and solvers estimate the bytes a request will need and call :func:`check_memory`
before allocating. The budget is what this process can really get, the smallest of

- the cgroup memory limit (containers, CI runners, Kubernetes pods),
- the address-space limit (``ulimit -v``, ``RLIMIT_AS``),
- the physical RAM,

times :data:`USABLE_FRACTION` (headroom for the interpreter, JAX's compilation and the
caller's own arrays). Set ``FABRICFLOW_MEMORY_BUDGET`` (bytes, or a size such as
``6GiB``) or pass ``budget=`` to override it.
"""

from __future__ import annotations

import numbers
import os
import resource

from fabricflow.errors import MemoryBudgetError, SpecError
from fabricflow.units import parse_size

USABLE_FRACTION = 0.75
ENV_VARIABLE = "FABRICFLOW_MEMORY_BUDGET"
_CGROUP_FILES = (
    "/sys/fs/cgroup/memory.max",  # cgroup v2
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
)  # cgroup v1


def physical_memory_bytes() -> int:
    """Installed RAM in bytes (16 GiB if the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def _cgroup_limit_bytes() -> int | None:
    for path in _CGROUP_FILES:
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" or a huge v1 value: no limit
            return int(text)
    return None


def _address_space_limit_bytes() -> int | None:
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def memory_limit_bytes() -> tuple[int, str]:
    """The tightest memory limit of this process and what sets it.

    Returns:
        ``(bytes, source)`` with ``source`` one of ``"cgroup"``, ``"RLIMIT_AS"``, ``"RAM"``.
    """
    limits = [(physical_memory_bytes(), "RAM")]
    cgroup = _cgroup_limit_bytes()
    if cgroup is not None:
        limits.append((cgroup, "cgroup"))
    address_space = _address_space_limit_bytes()
    if address_space is not None:
        # JAX/XLA and the interpreter map a few hundred MB of address space before any
        # array is made; what is left is what our arrays can use.
        from_current = address_space - _current_address_space_bytes()
        limits.append((max(from_current, 0), "RLIMIT_AS"))
    return min(limits)


def _current_address_space_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def memory_budget(budget: float | str | None = None, field: str = "budget") -> tuple[int, str]:
    """The byte budget for one request and a phrase saying where it comes from.

    Args:
        budget: an explicit budget (wins over everything else): bytes, or a size such as
            ``"6GiB"`` (:func:`fabricflow.units.parse_size`).
        field: the caller's name for ``budget``, for errors (``"memory_budget"``).

    Raises:
        SpecError: (``field``) ``budget`` is not a finite size > 0 (a bool, NaN, infinity,
            ``"6 lots"``, a list, ...).
    """
    if budget is not None:
        value = parse_size(budget, field, allow_zero=False)  # bool, NaN, inf, <= 0, junk
        # an integer budget stays exact (a float keeps only 53 bits)
        exact = int(budget) if isinstance(budget, numbers.Integral) else int(value)
        return exact, f"the {field} passed in"
    override = os.environ.get(ENV_VARIABLE)
    if override:
        try:
            value = int(parse_size(override))
        except SpecError as error:
            raise SpecError(ENV_VARIABLE, str(error)) from None
        if value <= 0:
            raise SpecError(ENV_VARIABLE, f"must be > 0 bytes, got {override!r}")
        return value, f"${ENV_VARIABLE}"
    limit, source = memory_limit_bytes()
    return int(USABLE_FRACTION * limit), f"{USABLE_FRACTION:.0%} of the {source} limit"


def check_memory(
    nbytes: float,
    what: str,
    *,
    hint: str = "",
    budget: float | str | None = None,
    field: str = "budget",
) -> None:
    """Refuse, before allocating, a request estimated at ``nbytes`` bytes over the budget.

    Args:
        nbytes: the estimated peak bytes of the request.
        what: what is being allocated, for the message (``"max-min solve of 1,000,000 flows"``).
        hint: how to make the request smaller, appended to the message.
        budget: bytes, or a size such as ``"6GiB"``; default :func:`memory_budget`
            (cgroup, ``RLIMIT_AS``, RAM, or ``$FABRICFLOW_MEMORY_BUDGET``).
        field: the caller's name for ``budget`` in a :class:`SpecError`
            (``simulate_cc`` passes ``"memory_budget"``).

    Raises:
        MemoryBudgetError: naming the size needed, the budget and where it comes from.
        SpecError: (``field``) ``budget`` is not a finite size > 0.
    """
    limit, source = memory_budget(budget, field)
    if nbytes > limit:
        # an explicit budget wins over the variable: naming it would send users astray
        change = f"pass a larger {field}" if budget is not None else f"set ${ENV_VARIABLE}"
        message = (
            f"{what} needs about {nbytes / 2**30:.2f} GiB, over the memory budget of "
            f"{limit / 2**30:.2f} GiB ({source}; {change} to change it)"
        )
        raise MemoryBudgetError(f"{message}: {hint}" if hint else message)


def out_of_memory(error: MemoryError, what: str) -> MemoryBudgetError:
    """Turn a raw ``MemoryError`` into a named error that says what ran out.

    Use as ``except MemoryError as e: raise out_of_memory(e, "building clos-100k") from e``.
    """
    if isinstance(error, MemoryBudgetError):
        return error
    limit, source = memory_limit_bytes()
    detail = f" ({error})" if str(error) else ""
    return MemoryBudgetError(
        f"{what} ran out of memory{detail}; this process may use about {limit / 2**30:.2f} GiB "
        f"({source}): make the problem smaller"
    )
