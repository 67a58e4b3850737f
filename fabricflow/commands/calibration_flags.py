"""``--calibration FILE`` and ``--interval-level``: the flags of the commands that read a
calibration (step, collective, optimize, design, report, cluster)."""

from __future__ import annotations

from fabricflow.workload.calibration import read_calibration
from fabricflow.workload.intervals import check_level


def add_calibration_flags(parser) -> None:
    """``--calibration FILE`` (a ``fabricflow calibrate`` output) and ``--interval-level``."""
    parser.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration YAML written by 'fabricflow calibrate': its fitted GPU and network "
        "parameters replace the model's, and intervals come from its uncertainty",
    )
    parser.add_argument(
        "--interval-level",
        type=float,
        default=0.8,
        help="level of the prediction intervals (share of outcomes inside)",
    )


def calibration_from_args(args):
    """The :class:`~fabricflow.workload.calibration.Calibration` of ``--calibration``
    (None without one); ``--interval-level`` checked."""
    check_level(getattr(args, "interval_level", 0.8))
    return None if args.calibration is None else read_calibration(args.calibration)
