"""Collective times for the step model and the cluster simulator (many group sets, many
sizes, one fabric).

:func:`collective_seconds` takes a fabric, an op (``all_reduce``, ``reduce_scatter``,
``all_gather``, ``all_to_all``, ``sendrecv``), GPU groups ``[num_groups, group_size]`` and
the message size in bytes (nccl-tests convention, see :mod:`.ops`) and returns the seconds
of every group, with all groups running concurrently on the fabric.

It delegates to the collective model (:func:`~.timing.prepare_collective`: NCCL-like
algorithms as flows, routed on the fabric, all groups sharing links through one max-min
solve), solved once per process per group structure (:mod:`.structure_cache`).
:func:`~.alpha_beta.alpha_beta_estimate`, an analytic estimate from per-GPU NVLink and NIC
bandwidths that ignores congestion above the NICs, stays available as
``backend="alpha-beta"`` for comparison. ``"fabric"`` (the collective model) is the
default. :class:`CollectiveCache` holds the group sets of one step
and prepares each (group set, op) once, memoising sizes, since a step asks for the same
ones repeatedly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

from fabricflow.collective import structure_cache
from fabricflow.collective.algorithms import algorithms_for
from fabricflow.collective.alpha_beta import ALPHA_BETA_OPS, alpha_beta_estimate
from fabricflow.collective.nccl_cost import DEFAULT_COST, CostModel
from fabricflow.collective.structure_cache import SolvedTimes
from fabricflow.collective.timing import ROUTINGS, prepare_collective, prepare_collectives
from fabricflow.errors import SpecError
from fabricflow.fabric.fabric import Fabric

__all__ = [
    "BACKENDS",
    "DIMENSION_OF_GROUP",
    "DIMENSION_OPS",
    "CollectiveCache",
    "check_algorithms",
    "check_backend",
    "check_cc",
    "collective_seconds",
    "collective_timer",
    "prepared_collective",
    "prepared_collectives",
]

BACKENDS = ("fabric", "alpha-beta")


def check_backend(backend: str, *, field: str = "backend") -> str:
    """``backend``, checked to be one of :data:`BACKENDS`; SpecError (naming ``field``)
    otherwise."""
    if backend not in BACKENDS:
        raise SpecError(field, f"unknown collective backend {backend!r}; one of {list(BACKENDS)}")
    return backend


def collective_seconds(
    fabric: Fabric, op: str, groups: np.ndarray, size: float, *, backend: str = "fabric"
) -> np.ndarray:
    """Seconds ``[num_groups]`` of ``op`` of ``size`` on every group, run concurrently.

    Args:
        fabric: the network.
        op: ``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all`` or ``sendrecv``.
        groups: int ``[num_groups, group_size]`` GPU indices.
        size: nccl-tests size (the buffer of one rank; see ``collective/ops.py``).
        backend: ``fabric`` (flows on the fabric, max-min shared) or ``alpha-beta`` (the
            analytic :func:`~.alpha_beta.alpha_beta_estimate`, no contention).
    """
    return collective_timer(fabric, op, groups, backend=check_backend(backend))(size)


def collective_timer(
    fabric: Fabric,
    op: str,
    groups: np.ndarray,
    *,
    backend: str = "fabric",
    field: str = "backend",
    seed: int = 0,
    algorithm: str = "auto",
    fingerprint: str | None = None,
    routing: str = "auto",
    cc: str | None = None,
    cost: CostModel = DEFAULT_COST,
):
    """A function ``size -> seconds [num_groups]`` for fixed (fabric, op, groups).

    With the collective model, routing and the max-min solve happen once per process for
    each (fabric, op, groups, ``algorithm``, ``seed``) (:func:`prepared_collective`); each size is
    then priced by NCCL's cost model on the solved rates. ``algorithm`` (``auto`` = fastest per
    size) is the collective model's algorithm; the alpha-beta estimate has no choice and
    ignores it. ``seed``: the ECMP hash seed of the routes. ``fingerprint``:
    :func:`~.structure_cache.fabric_fingerprint` of ``fabric``, if known. ``cc``: a
    congestion-control law whose fluid sets the collective model's phase rates
    (:mod:`.cc_rates`; ``None``: max-min). ``cost``: the collective model's
    :class:`~.nccl_cost.CostModel` (a calibrated one, docs/calibration.md); the alpha-beta
    estimate does not use it. The function's
    ``collective`` attribute is the :class:`~fabricflow.collective.PreparedCollective`
    (``None`` without one: alpha-beta, or one rank per group), for the step model's joint
    solves.
    """
    groups = _check_groups(fabric, groups)
    backend = check_backend(backend)
    if groups.shape[1] < 2:  # one rank per group: nothing to communicate

        def nothing(size: float) -> np.ndarray:
            _check_size(size)
            return np.zeros(groups.shape[0])

        nothing.collective = None  # type: ignore[attr-defined]
        return nothing
    if backend == "alpha-beta":
        if op not in ALPHA_BETA_OPS:
            raise SpecError(
                "op", f"the alpha-beta estimate knows {list(ALPHA_BETA_OPS)}, got {op!r}"
            )

        def estimate(size: float) -> np.ndarray:
            return alpha_beta_estimate(
                fabric, op, groups, _check_size(size), field=field, fingerprint=fingerprint
            )

        estimate.collective = None  # type: ignore[attr-defined]
        return estimate
    solved = prepared_collective(
        fabric,
        op,
        groups,
        algorithm=algorithm,
        routing=routing,
        seed=seed,
        fingerprint=fingerprint,
        cc=cc,
        cost=cost,
    )
    prepared = solved.prepared

    def timed(size: float) -> np.ndarray:
        if _check_size(size) == 0:
            return np.zeros(groups.shape[0])
        return solved(size)

    timed.collective = prepared  # type: ignore[attr-defined]
    return timed


def _check_groups(fabric: Fabric, groups) -> np.ndarray:
    """int64 ``[num_groups, group_size]`` GPU indices of ``fabric`` (SpecError otherwise)."""
    try:
        array = np.asarray(groups)
    except (TypeError, ValueError) as error:  # ragged rows
        raise SpecError("groups", f"all groups must have the same size ({error})") from None
    if array.ndim != 2 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise SpecError(
            "groups",
            f"must be integer GPU indices [num_groups, group_size], got shape "
            f"{list(array.shape)} of {array.dtype}",
        )
    if array.size and (array.min() < 0 or array.max() >= fabric.num_gpus):
        raise SpecError(
            "groups",
            f"GPU indices must lie in 0..{fabric.num_gpus - 1}; got "
            f"{int(array.min())}..{int(array.max())}",
        )
    return array.astype(np.int64)


def _check_size(size) -> float:
    """``size`` as a float: a real number, finite and >= 0 (SpecError otherwise)."""
    if (
        isinstance(size, bool)
        or not isinstance(size, numbers.Real)
        or not math.isfinite(size)
        or size < 0
    ):
        raise SpecError("size", f"must be a finite number of bytes >= 0, got {size!r}")
    return float(size)


# The collectives each parallel dimension runs (step model), for ``algorithms`` checks.
DIMENSION_OPS = {
    "tp": ("all_reduce", "all_gather", "reduce_scatter"),
    "cp": ("sendrecv",),
    "ep": ("all_to_all",),
    "pp": ("sendrecv",),
    "dp": ("all_reduce", "all_gather", "reduce_scatter"),
}
# Group sets named apart from their dimension: expert data parallel follows ``dp``.
DIMENSION_OF_GROUP = {"edp": "dp"}


def check_algorithms(algorithms: dict[str, str] | None) -> dict[str, str]:
    """``algorithms`` (dimension -> collective algorithm or ``auto``) with canonical names.

    SpecError ``algorithms.<dim>`` for an unknown dimension, or an algorithm that is
    unknown or implements none of the collectives the dimension runs.
    """
    if algorithms is None:
        return {}
    if not isinstance(algorithms, dict):
        raise SpecError(
            "algorithms",
            f"expected a dict dimension -> algorithm, e.g. {{'dp': 'ring'}}, got {algorithms!r}",
        )
    out = {}
    for dim, name in algorithms.items():
        if dim not in DIMENSION_OPS:
            raise SpecError(
                "algorithms", f"unknown dimension {dim!r}; one of {list(DIMENSION_OPS)}"
            )
        allowed = sorted({a for op in DIMENSION_OPS[dim] for a in algorithms_for(op)})
        if name != "auto" and name not in allowed:
            raise SpecError(
                f"algorithms.{dim}",
                f"unknown algorithm {name!r} for {dim} ({'/'.join(DIMENSION_OPS[dim])}); "
                f"one of {['auto', *allowed]}",
                value=name,
                allowed=["auto", *allowed],
            )
        out[dim] = name
    return out


def _check_algorithm_op(dim: str, algorithm: str, op: str) -> None:
    if algorithm not in algorithms_for(op):
        raise SpecError(
            f"algorithms.{dim}",
            f"{algorithm!r} does not implement {op}, which {dim} runs in this layout; "
            f"one of {['auto', *algorithms_for(op)]}",
        )


def check_cc(cc) -> str | None:
    """``cc`` as a congestion-control law's name, or ``None`` (max-min); SpecError on
    ``cc`` naming the laws otherwise."""
    if cc is None:
        return None
    # lazy: the rate laws import JAX; a max-min collective (cc=None) stays JAX-free
    from fabricflow.solve.cc.laws import resolve_law

    return resolve_law(cc).name


class CollectiveCache:
    """Memoised :func:`collective_seconds` for one fabric and a fixed set of group arrays.

    Group arrays are registered under a name (``"tp"``, ``"dp"``, ...) so the key is
    (name, op, size) and no array is hashed per call. ``seed``: the ECMP hash seed of every
    route. ``joint`` holds the step coupling's joint solves (:mod:`.coupling`), which depend
    on the group structure (and the sizes asked) only: with the fabric backend they live in
    the process-wide :mod:`.structure_cache` under this cache's structure key, so a later
    step with the same groups (a re-timed layout, an optimizer candidate differing in
    cheap knobs) reuses them.
    """

    def __init__(
        self,
        fabric: Fabric,
        backend: str = "fabric",
        *,
        field: str = "backend",
        seed: int = 0,
        algorithms: dict[str, str] | None = None,
        routing: str = "auto",
        cc: str | None = None,
        cost: CostModel = DEFAULT_COST,
    ):
        if not isinstance(cost, CostModel):
            raise SpecError("cost", f"expected a CostModel, got {type(cost).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise SpecError("seed", f"the routing seed must be an integer >= 0, got {seed!r}")
        if routing not in ROUTINGS:  # checked here: the alpha-beta backend never routes
            raise SpecError("routing", f"unknown routing {routing!r}; one of {list(ROUTINGS)}")
        self.fabric: Fabric = fabric
        self.seed: int = int(seed)
        self.routing: str = routing  # the collective model's routing
        self.backend: str = check_backend(backend, field=field)
        self.cc: str | None = check_cc(cc)  # its congestion control (None: max-min)
        if self.cc is not None and self.backend != "fabric":
            raise SpecError("cc", f"needs the fabric collective backend, not {self.backend!r}")
        self.cost: CostModel = cost  # the collective model's constants
        self.field: str = field
        self.algorithms: dict[str, str] = check_algorithms(algorithms)
        if self.backend != "fabric":  # the estimate neither routes nor picks an algorithm
            chosen = {f"algorithms.{dim}": a for dim, a in self.algorithms.items() if a != "auto"}
            if routing != "auto":
                chosen = {"routing": routing, **chosen}
            if chosen:
                name, value = next(iter(chosen.items()))
                raise SpecError(
                    name,
                    f"{value!r} needs the fabric collective backend: the {self.backend!r} "
                    "estimate neither routes flows nor picks an algorithm, so it would "
                    "ignore it; drop it or use the fabric backend",
                )
        self._fabric_fingerprint: str | None = None
        self.groups: dict[str, np.ndarray] = {}
        self._prepared: dict[tuple, Callable[[float], np.ndarray]] = {}
        self._times: dict[tuple, float] = {}
        self.joint: _JointStore = _JointStore(self)

    def _fingerprint(self) -> str:
        """The fabric's structure-cache fingerprint, hashed once per cache."""
        if self._fabric_fingerprint is None:
            self._fabric_fingerprint = structure_cache.fabric_fingerprint(self.fabric)
        return self._fabric_fingerprint

    def add(self, name: str, groups: np.ndarray) -> None:
        if self.joint.frozen:
            # the joint solves already stored are keyed by the groups registered so far
            raise RuntimeError("CollectiveCache.add after the coupling used the cache")
        self.groups[name] = np.asarray(groups, dtype=np.int64)

    def structure_key(self) -> tuple | None:
        """What every time of this cache depends on (fabric fingerprint, routing and its seed,
        algorithms, each registered group set's digest), or ``None`` without the fabric
        backend."""
        if self.backend != "fabric":
            return None
        return (
            self._fingerprint(),
            self.routing,
            self.seed,
            tuple(sorted(self.algorithms.items())),
            tuple(
                (name, structure_cache.groups_digest(groups))
                for name, groups in sorted(self.groups.items())
            ),
            *(() if self.cc is None else (("cc", self.cc),)),
            *(() if self.cost is DEFAULT_COST else (("cost", self.cost.key()),)),
        )

    def slowest(self, name: str, op: str, size: float) -> float:
        """Seconds of the slowest group of ``name`` (synchronous training waits for it)."""
        key = (name, op, float(size))
        if key not in self._times:
            times = self._timer(name, op)(size)
            self._times[key] = float(times.max()) if times.size else 0.0
        return self._times[key]

    def asked(self) -> dict[tuple, float]:
        """``{(name, op, size): slowest-group seconds}`` of every time asked so far."""
        return dict(self._times)

    def collective(self, name: str, op: str):
        """The :class:`~fabricflow.collective.PreparedCollective` behind ``(name, op)``, or
        ``None`` (alpha-beta backend, or one rank per group)."""
        return self._timer(name, op).collective  # type: ignore[attr-defined]

    def prepare_many(self, pairs) -> None:
        """Prepare the collectives ``[(name, op), ...]`` the step will ask for, together:
        the ones not solved yet are routed and solved in one batch
        (:func:`prepared_collectives`); the answers are those of one at a time. With a
        congestion control each is prepared when first asked for, as its own fluid runs."""
        if self.backend != "fabric" or self.cc is not None:
            return
        todo = {}
        for name, op in pairs:
            if (name, op) in self._prepared or self.groups[name].shape[1] < 2:
                continue
            algorithm = self.algorithms.get(DIMENSION_OF_GROUP.get(name, name), "auto")
            if algorithm != "auto":
                _check_algorithm_op(DIMENSION_OF_GROUP.get(name, name), algorithm, op)
            todo[(name, op)] = (op, self.groups[name], algorithm)
        if len(todo) > 1:
            prepared_collectives(
                self.fabric,
                list(todo.values()),
                routing=self.routing,
                seed=self.seed,
                fingerprint=self._fingerprint(),
                cost=self.cost,
            )

    def _timer(self, name: str, op: str) -> Callable[[float], np.ndarray]:
        if (name, op) not in self._prepared:
            algorithm = self.algorithms.get(DIMENSION_OF_GROUP.get(name, name), "auto")
            if algorithm != "auto" and self.backend == "fabric":
                _check_algorithm_op(DIMENSION_OF_GROUP.get(name, name), algorithm, op)
            self._prepared[(name, op)] = collective_timer(
                self.fabric,
                op,
                self.groups[name],
                backend=self.backend,
                field=self.field,
                seed=self.seed,
                algorithm=algorithm,
                fingerprint=self._fingerprint(),
                routing=self.routing,
                cc=self.cc,
                cost=self.cost,
            )
        return self._prepared[(name, op)]


class _JointStore:
    """Mapping of the step coupling's joint solves for one :class:`CollectiveCache`.

    Entries go to the process-wide :mod:`.structure_cache` (LRU, bounded in bytes) under
    the cache's :meth:`~CollectiveCache.structure_key`, or to a local dict without the
    fabric backend. The key is taken at the first use, after every group set is
    registered (``frozen`` from then on).
    """

    def __init__(self, owner: CollectiveCache):
        self._owner = owner
        self._prefix: tuple | None = None
        self._local: dict[tuple, object] | None = None
        self.frozen = False

    def _key(self, key: tuple) -> tuple | None:
        if not self.frozen:
            self.frozen = True
            structure = self._owner.structure_key()
            if structure is None:
                self._local = {}
            else:
                self._prefix = ("joint", structure)
        return None if self._prefix is None else (*self._prefix, key)

    def __contains__(self, key: tuple) -> bool:
        full = self._key(key)
        if full is None:
            assert self._local is not None
            return key in self._local
        return structure_cache.lookup(full) is not structure_cache.MISSING

    def __getitem__(self, key: tuple) -> object:
        full = self._key(key)
        if full is None:
            assert self._local is not None
            return self._local[key]
        value = structure_cache.lookup(full)
        if value is structure_cache.MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: tuple, value: object) -> None:
        full = self._key(key)
        if full is None:
            assert self._local is not None
            self._local[key] = value
        else:
            structure_cache.store(full, value)


def prepared_collectives(
    fabric: Fabric,
    requests: list[tuple[str, np.ndarray, str]],
    *,
    routing: str = "auto",
    seed: int = 0,
    fingerprint: str | None = None,
    cost: CostModel = DEFAULT_COST,
) -> list[SolvedTimes]:
    """:func:`prepared_collective` of many ``(op, groups, algorithm)`` at once: the ones not
    in the process-wide cache are prepared together (:func:`~.timing.prepare_collectives`,
    per algorithm choice) and cached one by one under their own keys."""
    if fingerprint is None:
        fingerprint = structure_cache.fabric_fingerprint(fabric)
    keys = [
        _collective_key(fingerprint, op, groups, algorithm, routing, seed, cost=cost)
        for op, groups, algorithm in requests
    ]
    found = [structure_cache.lookup(key) for key in keys]
    missing = [i for i, value in enumerate(found) if value is structure_cache.MISSING]
    for algorithm in sorted({requests[i][2] for i in missing}):
        chosen = [i for i in missing if requests[i][2] == algorithm]
        prepared = prepare_collectives(
            fabric,
            [requests[i][:2] for i in chosen],
            algorithm=algorithm,
            routing=routing,
            seed=seed,
            fabric_fingerprint=fingerprint,
            cost=cost,
        )
        for i, pc in zip(chosen, prepared, strict=True):
            found[i] = SolvedTimes(pc)
            structure_cache.store(keys[i], found[i])
    return found


def _collective_key(
    fingerprint, op, groups, algorithm, routing, seed, cc=None, cost: CostModel = DEFAULT_COST
) -> tuple:
    return (
        "collective",
        fingerprint,
        str(op),
        structure_cache.groups_digest(groups),
        str(algorithm),
        str(routing),
        int(seed),
        *(() if cc is None else (("cc", str(cc)),)),
        *(() if cost is DEFAULT_COST else (("cost", cost.key()),)),
    )


def prepared_collective(
    fabric: Fabric,
    op: str,
    groups: np.ndarray,
    *,
    algorithm: str = "auto",
    routing: str = "auto",
    seed: int = 0,
    fingerprint: str | None = None,
    cc: str | None = None,
    cost: CostModel = DEFAULT_COST,
) -> SolvedTimes:
    """:func:`fabricflow.collective.prepare_collective` of ``(fabric, op, groups)``, solved
    once per process for each (fabric fingerprint, op, groups digest, algorithm, routing, seed).

    ``fingerprint``: :func:`~.structure_cache.fabric_fingerprint` of ``fabric`` when the caller already has
    it (a step asks for several collectives on one fabric). ``cc``: a congestion-control law
    whose fluid sets the phase rates (:mod:`.cc_rates`), or ``None`` for max-min.
    ``cost``: the :class:`~.nccl_cost.CostModel` (part of the key)."""
    if fingerprint is None:
        fingerprint = structure_cache.fabric_fingerprint(fabric)
    key = _collective_key(fingerprint, op, groups, algorithm, routing, seed, cc, cost)
    return structure_cache.cached(
        key,
        lambda: SolvedTimes(
            prepare_collective(
                fabric,
                op,
                groups,
                algorithm=algorithm,
                routing=routing,
                seed=seed,
                fabric_fingerprint=fingerprint,
                solver=None if cc is None else _cc_solver(fabric, cc),
                cost=cost,
            )
        ),
    )


def _cc_solver(fabric: Fabric, cc: str):
    # lazy: the congestion-control fluid imports JAX; a max-min collective stays JAX-free
    from fabricflow.collective.cc_rates import CCRates

    return CCRates(fabric, cc)
