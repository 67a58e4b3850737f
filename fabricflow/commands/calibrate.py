"""``fabricflow calibrate``: fit the model's physical parameters to the user's measurements.

Example::

    fabricflow calibrate --nccl-tests node.log two-nodes.log --fabric dgx-h100-superpod \\
        --gpus 8 --steps steps.yaml --out calibration.yaml
"""

from __future__ import annotations

from fabricflow.atomic import write_text
from fabricflow.commands.common import (
    IMPORT_FLAGS,
    add_fabric_flags,
    add_json_flag,
    load_fabric_flags,
    output_file,
    print_json,
    write_outputs,
)
from fabricflow.fitting import calibrate
from fabricflow.units import parse_size
from fabricflow.workload.calibration import calibration_text


def register(parser) -> None:
    parser.description = (
        "Fit the model's physical parameters (network efficiencies and "
        "latencies from nccl-tests logs; GPU efficiencies and host times from measured "
        "steps) and write a calibration file that --calibration of step, collective, "
        "optimize, design, report, cluster and sweep reads (docs/calibration.md)."
    )
    parser.add_argument(
        "--nccl-tests", nargs="+", default=[], metavar="LOG", help="nccl-tests output files"
    )
    add_fabric_flags(parser, optional=True, help_suffix=": the fabric the logs ran on")
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs of a log that lists no ranks (the first N of the fabric)",
    )
    parser.add_argument(
        "--op",
        default=None,
        help="op of logs that do not name their nccl-tests binary (all_reduce, ...)",
    )
    parser.add_argument(
        "--min-size", default="1MiB", help="smallest message size fitted (default 1MiB)"
    )
    parser.add_argument(
        "--steps",
        default=None,
        metavar="FILE",
        help="YAML list of measured runs: the options of 'fabricflow step' as keys and step_time_s",
    )
    parser.add_argument(
        "--parameters",
        default=None,
        metavar="NAME,NAME",
        help="fit only these parameters (gpu.gemm_efficiency, network.scale_up_efficiency, "
        "...); default: every one the inputs bear on",
    )
    parser.add_argument(
        "--out",
        default=None,
        type=output_file,
        metavar="FILE",
        help="write the calibration YAML here",
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _fabric(args):
    """The fabric of ``--fabric`` and its import flags, or None without either."""
    given = [getattr(args, key) for key in ("fabric", *IMPORT_FLAGS)]
    return None if all(value is None for value in given) else load_fabric_flags(args)


def run(args) -> int:
    result = calibrate(
        args.nccl_tests,
        fabric=_fabric(args),
        gpus=args.gpus,
        steps=args.steps,
        op=args.op,
        min_size=parse_size(args.min_size, "--min-size", allow_zero=False),
        parameters=None if args.parameters is None else args.parameters.split(","),
    )
    out = result.to_dict()
    if args.out is not None:
        if write_outputs(args, "--out", write_text, args.out, calibration_text(result)):
            out["file"] = args.out
    if args.json:
        print_json(out)
        return 0
    print("parameter                              prior       value  +- sigma  determined")
    for name, p in result.parameters.items():
        print(
            f"{name:36s} {p.prior:10.4g} {p.value:11.4g} {p.uncertainty:9.2g}  "
            f"{'yes' if p.determined else 'no: ' + p.source.removeprefix('prior: ')}"
        )
    for entry in result.inputs:
        if entry["kind"] == "nccl-tests":
            worst = max(entry["sizes"], key=lambda s: abs(s["residual"]))
            print(
                f"{entry['input']}: {entry['op']} on {entry['gpus']} GPUs, {len(entry['sizes'])}"
                f" sizes, worst busbw residual {100 * worst['residual']:+.1f}% at "
                f"{worst['bytes']} B"
            )
        else:
            print(
                f"{entry['input']}: measured {entry['measured_step_time_s']:.4g} s, "
                f"uncalibrated {entry['uncalibrated_step_time_s']:.4g} s, calibrated "
                f"{entry['calibrated_step_time_s']:.4g} s ({100 * entry['residual']:+.1f}%)"
            )
    if "file" in out:
        print(f"calibration written to {out['file']}")
    return 0
