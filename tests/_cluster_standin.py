"""A minimal stand-in for the cluster state, schedulers and interference model.

Only for the cluster-core tests while ``fabricflow.cluster.state`` / ``schedulers`` /
``interference`` are not in the tree: first free GPUs, whole spare nodes, no contention.
The fixture in the tests installs it only when the real modules cannot be imported.
"""

from __future__ import annotations

import sys
import types
from typing import NamedTuple

import numpy as np

from fabricflow.errors import SpecError

FREE, DOWN, SPARE = -1, -2, -3


class ClusterState:
    def __init__(self, fabric):
        self.fabric = fabric
        self.owner = np.full(fabric.num_gpus, FREE, dtype=np.int32)
        self.gpn = max(1, fabric.gpus_per_node)

    def free_gpus(self):
        return np.flatnonzero(self.owner == FREE).astype(np.int64)

    def allocate(self, key, gpus):
        gpus = np.asarray(gpus, dtype=np.int64)
        if np.any(self.owner[gpus] != FREE) or np.unique(gpus).size != gpus.size:
            raise SpecError("gpus", "not free")
        self.owner[gpus] = key

    def release(self, key):
        gpus = np.flatnonzero(self.owner == key)
        self.owner[gpus] = FREE
        return gpus

    def gpus_of(self, key):
        return np.flatnonzero(self.owner == key)

    def set_down(self, gpus):
        gpus = np.asarray(gpus, dtype=np.int64)
        keys = np.unique(self.owner[gpus][self.owner[gpus] >= 0])
        self.owner[gpus] = DOWN
        return keys

    def set_up(self, gpus):
        gpus = np.asarray(gpus, dtype=np.int64)
        self.owner[gpus[self.owner[gpus] == DOWN]] = FREE

    def reserve_spares(self, gpus):
        gpus = np.asarray(gpus, dtype=np.int64)
        assert np.all(self.owner[gpus] == FREE)
        self.owner[gpus] = SPARE

    def take_spare(self, count):
        nodes = self.owner.size // self.gpn
        whole = np.flatnonzero(
            (self.owner[: nodes * self.gpn].reshape(nodes, self.gpn) == SPARE).all(axis=1)
        )
        need = -(-count // self.gpn)
        if whole.size < need:
            return None
        gpus = (whole[:need, None] * self.gpn + np.arange(self.gpn)).ravel()
        self.owner[gpus] = FREE
        return gpus

    def fragmentation(self):
        free = self.owner == FREE
        if not free.any():
            return 0.0
        nodes = self.owner.size // self.gpn
        per_node = free[: nodes * self.gpn].reshape(nodes, self.gpn)
        partial = per_node.any(axis=1) & ~per_node.all(axis=1)
        return float(per_node[partial].sum() / free.sum())


SCHEDULERS = ("first-fit", "packed", "topology", "block")


class Request(NamedTuple):
    key: int
    gpus: int
    priority: int
    traffic: object


class _FirstFree:
    def __init__(self, name):
        self.name = name

    def place(self, state, request, load):
        free = state.free_gpus()
        return free[: request.gpus] if free.size >= request.gpus else None

    def victims(self, state, request, running):
        need = request.gpus - state.free_gpus().size
        chosen, freed = [], 0
        for key, _ in sorted(running.items(), key=lambda kv: kv[1]):
            if freed >= need:
                break
            chosen.append(key)
            freed += state.gpus_of(key).size
        return chosen if freed >= need else []


def make_scheduler(name, fabric, **options):
    if name not in SCHEDULERS:
        raise SpecError("scheduler", f"unknown {name!r}; allowed: {list(SCHEDULERS)}")
    return _FirstFree(name)


class Interference:
    """No contention: every job at its standalone step time."""

    def __init__(self, fabric, *, routing="auto", seed=0):
        self.fabric = fabric
        self.jobs = {}
        self.stats = {"reevaluations": 0}

    def add(self, key, job, standalone, gpus):
        self.jobs[key] = standalone.step_time_s

    def remove(self, key):
        self.jobs.pop(key)

    def set_fabric(self, fabric):
        self.fabric = fabric

    def step_times(self):
        self.stats["reevaluations"] += 1
        return dict(self.jobs)

    def link_load(self):
        return np.zeros(self.fabric.num_links)


def install(monkeypatch) -> bool:
    """Put the stand-in modules in place of the missing real ones; True if it did."""
    try:
        import fabricflow.cluster.schedulers  # noqa: F401
        import fabricflow.cluster.state  # noqa: F401

        return False
    except ImportError:
        pass
    this = sys.modules[__name__]
    for name in ("state", "schedulers", "interference"):
        module = types.ModuleType(f"fabricflow.cluster.{name}")
        module.__dict__.update({k: getattr(this, k) for k in dir(this) if not k.startswith("__")})
        monkeypatch.setitem(sys.modules, f"fabricflow.cluster.{name}", module)
        monkeypatch.setattr(f"fabricflow.cluster.{name}", module, raising=False)
    return True
