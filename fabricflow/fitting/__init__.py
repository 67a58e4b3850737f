"""Fitting: the model's physical parameters fitted to a user's own measurements (calibration).

:func:`calibrate` takes nccl-tests logs (the network side: :mod:`.network`) and measured
training steps (the compute side: :mod:`.steps`) and returns a
:class:`~fabricflow.workload.calibration.Calibration`; :mod:`.fit` is the least-squares
fit with identifiability and uncertainties. docs/calibration.md has a worked example.
"""

from __future__ import annotations

from fabricflow.fitting.from_measurements import calibrate

__all__ = ["calibrate"]
