"""The one place where the step model asks for collective times on a fabric.

:func:`collective_seconds` takes a fabric, an op (``all_reduce``, ``reduce_scatter``,
``all_gather``, ``all_to_all``, ``sendrecv``), GPU groups ``[num_groups, group_size]`` and
the message size in bytes (nccl-tests convention, see ``collective/ops.py``) and returns
the seconds of every group, with all groups running concurrently on the fabric.

It delegates to the collective model (``fabricflow.collective.prepare_collective``: NCCL-like
algorithms as flows, routed on the fabric, all groups sharing links through one max-min
solve). :func:`alpha_beta_estimate`, an analytic ring / direct estimate from per-GPU NVLink
and NIC bandwidths (docs/references.md §4) that ignores congestion above the NICs, stays available
as ``backend="alpha-beta"`` for comparison. ``"fabric"`` (the collective model) is the
default; ``"auto"`` and ``"collective-model"`` are its former names, still accepted with a
:class:`DeprecationWarning`. :class:`CollectiveCache` prepares each
(group set, op) once and memoises sizes, since a step asks for the same ones repeatedly.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable

import numpy as np

from ..errors import SpecError
from ..fabric.fabric import Fabric
from . import structure_cache

BACKENDS = ("fabric", "alpha-beta")
# The ops alpha_beta_estimate has a formula for.
ALPHA_BETA_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv")
# Former names of "fabric", still accepted because ``step_time(collectives=...)`` is public.
DEPRECATED_BACKENDS = {"auto": "fabric", "collective-model": "fabric"}

# NCCL Simple-protocol latencies (docs/references.md §4, tuning.cc): base + per hop.
BASE_LATENCY_S = 8.4e-6
NVLINK_HOP_S = 3.4e-6
NETWORK_HOP_S = 14.0e-6


def resolve_backend(backend: str, *, field: str = "backend", stacklevel: int = 3) -> str:
    """``backend`` as one of :data:`BACKENDS` (deprecated aliases warn, attributed
    ``stacklevel`` frames up: the user's call); SpecError otherwise."""
    if backend in DEPRECATED_BACKENDS:
        new = DEPRECATED_BACKENDS[backend]
        warnings.warn(
            f"collective backend {backend!r} is deprecated; use {new!r}",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return new
    if backend not in BACKENDS:
        raise SpecError(field, f"unknown collective backend {backend!r}; one of {list(BACKENDS)}")
    return backend


def collective_seconds(
    fabric: Fabric, op: str, groups: np.ndarray, size_bytes: float, *, backend: str = "fabric"
) -> np.ndarray:
    """Seconds ``[num_groups]`` of ``op`` of ``size_bytes`` on every group, run concurrently.

    Args:
        fabric: the network.
        op: ``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all`` or ``sendrecv``.
        groups: int ``[num_groups, group_size]`` GPU indices.
        size_bytes: nccl-tests size (the buffer of one rank; see ``collective/ops.py``).
        backend: ``fabric`` (flows on the fabric, max-min shared) or ``alpha-beta`` (the
            analytic :func:`alpha_beta_estimate`, no contention).
    """
    return prepare(fabric, op, groups, backend=resolve_backend(backend))(size_bytes)


def prepare(
    fabric: Fabric,
    op: str,
    groups: np.ndarray,
    *,
    backend: str = "fabric",
    field: str = "backend",
    seed: int = 0,
    algo: str = "auto",
    fingerprint: str | None = None,
    routing: str = "auto",
    cc: str | None = None,
):
    """A function ``size_bytes -> seconds [num_groups]`` for fixed (fabric, op, groups).

    With the collective model, routing and the max-min solve happen once per process for
    each (fabric, op, groups, ``algo``, ``seed``) (:mod:`.structure_cache`); each size is
    then priced by NCCL's cost model on the solved rates. ``algo`` (``auto`` = fastest per
    size) is the collective model's algorithm; the alpha-beta estimate has no choice and
    ignores it. ``seed``: the ECMP hash seed of the routes. ``fingerprint``:
    :func:`.structure_cache.fabric_fingerprint` of ``fabric``, if known. ``cc``: a
    congestion-control law whose fluid sets the collective model's phase rates
    (:mod:`fabricflow.collective.cc_rates`; ``None``: max-min). The function's
    ``collective`` attribute is the :class:`~fabricflow.collective.PreparedCollective`
    (``None`` without one: alpha-beta, or one rank per group), for the step model's joint
    solves.
    """
    groups = _check_groups(fabric, groups)
    backend = resolve_backend(backend, stacklevel=4)
    if groups.shape[1] < 2:  # one rank per group: nothing to communicate

        def nothing(size_bytes: float) -> np.ndarray:
            _check_size(size_bytes)
            return np.zeros(groups.shape[0])

        nothing.collective = None  # type: ignore[attr-defined]
        return nothing
    if backend == "alpha-beta":
        if op not in ALPHA_BETA_OPS:
            raise SpecError(
                "op", f"the alpha-beta estimate knows {list(ALPHA_BETA_OPS)}, got {op!r}"
            )

        def estimate(size_bytes: float) -> np.ndarray:
            return alpha_beta_estimate(fabric, op, groups, _check_size(size_bytes), field=field)

        estimate.collective = None  # type: ignore[attr-defined]
        return estimate
    solved = structure_cache.prepared_collective(
        fabric, op, groups, algo=algo, routing=routing, seed=seed, fingerprint=fingerprint, cc=cc
    )
    prepared = solved.prepared

    def timed(size_bytes: float) -> np.ndarray:
        if _check_size(size_bytes) == 0:
            return np.zeros(groups.shape[0])
        return solved(size_bytes)

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


def _check_size(size_bytes) -> float:
    """``size_bytes`` as a float: a real number, finite and >= 0 (SpecError otherwise)."""
    if (
        isinstance(size_bytes, bool)
        or not isinstance(size_bytes, numbers.Real)
        or not math.isfinite(size_bytes)
        or size_bytes < 0
    ):
        raise SpecError("size_bytes", f"must be a finite number of bytes >= 0, got {size_bytes!r}")
    return float(size_bytes)


def _per_gpu_bandwidth(fabric: Fabric, kind: str) -> np.ndarray:
    """float64 ``[G]``: total capacity (bytes/s) of the ``kind`` links leaving each GPU."""
    if kind not in fabric.link_kinds:
        return np.zeros(fabric.num_gpus)
    node_to_gpu = np.full(fabric.num_nodes, -1, dtype=np.int64)
    node_to_gpu[fabric.gpu_node] = np.arange(fabric.num_gpus)
    links = fabric.links_of_kind(kind)
    owner = node_to_gpu[fabric.link_src[links]]
    keep = owner >= 0
    return np.bincount(owner[keep], weights=fabric.capacity[links][keep], minlength=fabric.num_gpus)


def alpha_beta_estimate(
    fabric: Fabric, op: str, groups: np.ndarray, size_bytes: float, *, field: str = "backend"
) -> np.ndarray:
    """Analytic estimate (not the fabric flow model): ring collectives and direct all-to-all.

    A group inside one scale-up domain runs at the per-GPU NVLink bandwidth ``B_nv``. A group
    spread over ``D`` domains with ``k`` members each runs its rings over ``k`` NICs per
    domain (one ring channel per rail): bus bandwidth ``min(B_nv, k B_nic)``; its all-to-all
    sends the off-domain share over each GPU's own NIC. Times (``n`` ranks, ``S`` bytes):
    all-reduce ``2 (n-1)/n S / B``, reduce-scatter / all-gather ``(n-1)/n S / B``,
    all-to-all ``max((k-1)/n S / B_nv, (n-k)/n S / B_nic)``, send/recv ``S / B``; plus
    NCCL's Simple-protocol latency per ring step. Concurrent groups only share NICs as
    the per-rail rings above do; spine congestion is not seen here. A group whose GPUs
    cannot reach each other raises :class:`RoutingError`; one without the NVLink/NIC
    bandwidth the formulas need raises :class:`SpecError` on ``field`` (never inf/NaN).
    """
    groups = np.asarray(groups, dtype=np.int64)
    num_groups, n = groups.shape
    domains = np.sort(fabric.gpu_domain[groups], axis=1)
    num_domains = 1 + np.count_nonzero(np.diff(domains, axis=1), axis=1)  # [G]
    per_domain = n / num_domains
    nvlink = _per_gpu_bandwidth(fabric, "nvlink")[groups].min(axis=1)
    nic = _per_gpu_bandwidth(fabric, "nic")[groups].min(axis=1)
    if not np.any(nvlink > 0):
        nvlink = nic
    intra = num_domains == 1
    ring_bw = np.where(intra, nvlink, np.minimum(nvlink, per_domain * nic))
    if n > 1:
        _require_bandwidth(fabric, op, groups, nvlink, nic, intra, per_domain, ring_bw, field)
    else:
        # One rank moves nothing over links: a missing bandwidth must not make 0 / 0.
        ring_bw, nvlink, nic = (np.where(bw > 0, bw, np.inf) for bw in (ring_bw, nvlink, nic))
    hop = np.where(intra, NVLINK_HOP_S, NETWORK_HOP_S)
    if op == "all_reduce":
        time = 2 * (n - 1) / n * size_bytes / ring_bw + BASE_LATENCY_S + 2 * (n - 1) * hop
    elif op in ("reduce_scatter", "all_gather"):
        time = (n - 1) / n * size_bytes / ring_bw + BASE_LATENCY_S + (n - 1) * hop
    elif op == "all_to_all":
        local = (per_domain - 1) / n * size_bytes / nvlink
        remote = np.where(intra, 0.0, (n - per_domain) / n * size_bytes / np.maximum(nic, 1e-30))
        time = np.maximum(local, remote) + BASE_LATENCY_S + hop
    elif op == "sendrecv":
        # The slowest pair of the group: across domains if any member is elsewhere.
        time = size_bytes / np.where(intra, nvlink, np.minimum(nvlink, nic)) + BASE_LATENCY_S + hop
    else:
        raise ValueError(f"unknown op {op!r}")
    return np.broadcast_to(time, (num_groups,)).astype(np.float64)


def _require_bandwidth(fabric, op, groups, nvlink, nic, intra, per_domain, ring_bw, field) -> None:
    """Refuse groups the alpha-beta formulas would give an infinite or NaN time: a group
    with no path between its GPUs is a :class:`RoutingError` (as with the fabric backend),
    one whose GPUs have no NVLink/NIC bandwidth the formulas use is a :class:`SpecError`."""
    if op == "all_to_all":
        missing = ((per_domain > 1) & ~(nvlink > 0)) | (~intra & ~(nic > 0))
    else:
        missing = ~(ring_bw > 0)
    if not missing.any():
        return
    from ..routing.route import route  # imported here: routing is not needed otherwise

    group = groups[int(np.argmax(missing))]
    # Ring neighbours: raises RoutingError when some member cannot reach the next one.
    route(fabric, group, np.roll(group, -1))
    raise SpecError(
        field,
        f"the alpha-beta backend needs scale-up (nvlink) or NIC (nic) bandwidth out of each "
        f"GPU, but fabric {fabric.name!r} gives GPUs {group.tolist()[:8]} none it can use "
        f"(nvlink {float(nvlink.min()) * 8 / 1e9:g} Gbps, nic {float(nic.min()) * 8 / 1e9:g} "
        "Gbps); use the 'fabric' backend",
    )


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
    from ..collective.algorithms import ALIASES, algorithms_for

    out = {}
    for dim, name in algorithms.items():
        if dim not in DIMENSION_OPS:
            raise SpecError(
                "algorithms", f"unknown dimension {dim!r}; one of {list(DIMENSION_OPS)}"
            )
        allowed = sorted({a for op in DIMENSION_OPS[dim] for a in algorithms_for(op)})
        key = ALIASES.get(str(name).lower(), str(name).lower())
        if key != "auto" and key not in allowed:
            raise SpecError(
                f"algorithms.{dim}",
                f"unknown algorithm {name!r} for {dim} ({'/'.join(DIMENSION_OPS[dim])}); "
                f"one of {['auto', *allowed]}",
            )
        out[dim] = key
    return out


def _check_algorithm_op(dim: str, algo: str, op: str) -> None:
    from ..collective.algorithms import algorithms_for

    if algo not in algorithms_for(op):
        raise SpecError(
            f"algorithms.{dim}",
            f"{algo!r} does not implement {op}, which {dim} runs in this layout; "
            f"one of {['auto', *algorithms_for(op)]}",
        )


def check_cc(cc) -> str | None:
    """``cc`` as a congestion-control law's name, or ``None`` (max-min); SpecError on
    ``cc`` naming the laws otherwise."""
    if cc is None:
        return None
    from ..solve.cc.laws import resolve_law  # deferred: the rate laws import JAX

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
    ):
        from ..collective.model import ROUTINGS

        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise SpecError("seed", f"the routing seed must be an integer >= 0, got {seed!r}")
        if routing not in ROUTINGS:  # checked here: the alpha-beta backend never routes
            raise SpecError("routing", f"unknown routing {routing!r}; one of {list(ROUTINGS)}")
        self.fabric: Fabric = fabric
        self.seed: int = int(seed)
        self.routing: str = routing  # the collective model's routing
        self.cc: str | None = check_cc(cc)  # its congestion control (None: max-min)
        # Called by step_time on the user's behalf: warn at the user's call.
        self.backend: str = resolve_backend(backend, field=field, stacklevel=5)
        if self.cc is not None and self.backend != "fabric":
            raise SpecError("cc", f"needs the fabric collective backend, not {self.backend!r}")
        self.field: str = field
        self.algorithms: dict[str, str] = check_algorithms(algorithms)
        self._fabric_fingerprint: str | None = None
        self.groups: dict[str, np.ndarray] = {}
        self._prepared: dict[tuple, Callable[[float], np.ndarray]] = {}
        self._times: dict[tuple, float] = {}
        self.joint: _JointStore = _JointStore(self)

    def _fingerprint(self) -> str | None:
        """The fabric's structure-cache fingerprint, hashed once per cache (fabric backend)."""
        if self.backend != "fabric":
            return None
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
        fingerprint = self._fingerprint()
        if fingerprint is None:
            return None
        return (
            fingerprint,
            self.routing,
            self.seed,
            tuple(sorted(self.algorithms.items())),
            tuple(
                (name, structure_cache.groups_digest(groups))
                for name, groups in sorted(self.groups.items())
            ),
            *(() if self.cc is None else (("cc", self.cc),)),
        )

    def slowest(self, name: str, op: str, size_bytes: float) -> float:
        """Seconds of the slowest group of ``name`` (synchronous training waits for it)."""
        key = (name, op, float(size_bytes))
        if key not in self._times:
            times = self._timer(name, op)(size_bytes)
            self._times[key] = float(times.max()) if times.size else 0.0
        return self._times[key]

    def asked(self) -> dict[tuple, float]:
        """``{(name, op, size_bytes): slowest-group seconds}`` of every time asked so far."""
        return dict(self._times)

    def collective(self, name: str, op: str):
        """The :class:`~fabricflow.collective.PreparedCollective` behind ``(name, op)``, or
        ``None`` (alpha-beta backend, or one rank per group)."""
        return self._timer(name, op).collective  # type: ignore[attr-defined]

    def _timer(self, name: str, op: str) -> Callable[[float], np.ndarray]:
        if (name, op) not in self._prepared:
            algo = self.algorithms.get(DIMENSION_OF_GROUP.get(name, name), "auto")
            if algo != "auto" and self.backend == "fabric":
                _check_algorithm_op(DIMENSION_OF_GROUP.get(name, name), algo, op)
            self._prepared[(name, op)] = prepare(
                self.fabric,
                op,
                self.groups[name],
                backend=self.backend,
                field=self.field,
                seed=self.seed,
                algo=algo,
                fingerprint=self._fingerprint(),
                routing=self.routing,
                cc=self.cc,
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
