"""Resumable parameter sweeps into zarr stores: local processes or Dask distributed.

:func:`sweep` (also ``fabricflow.sweeps``) runs a task over a grid; ``fabricflow sweep
SPEC.yaml --out STORE`` does the same from a SPEC file. See ``docs/sweeps.md``.
"""

from fabricflow.sweeps.grid_spec import SweepSpec, make_spec, read_sweep_spec
from fabricflow.sweeps.run import SweepRun, failed_points, run_sweep, sweep
from fabricflow.sweeps.tasks import SweepTask, get_task

__all__ = [
    "SweepRun",
    "SweepSpec",
    "SweepTask",
    "failed_points",
    "get_task",
    "make_spec",
    "read_sweep_spec",
    "run_sweep",
    "sweep",
]
