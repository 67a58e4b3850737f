"""CLI subcommands, one module each; see :mod:`fabricflow.cli`.

:data:`COMMANDS` names every command with its one-line summary: ``fabricflow --help`` and
the did-you-mean of a misspelled command read it, so they import no command module. The
command ``NAME`` lives in the module ``NAME`` (``-`` as ``_``), which provides
``register(parser)`` (adds the command's flags to its parser and sets its
``func(args) -> int``) and imports what it needs at its top: the CLI imports the one
module of the command that runs. The modules of :data:`HELPERS` are no commands: what
the commands and the CLI share.
"""

from __future__ import annotations

#: Command name -> its one-line summary (``fabricflow --help``), in the order listed.
COMMANDS = {
    "bench": "scale benchmarks (fabric, maxmin, ...)",
    "calibrate": "fit GPU and network parameters to nccl-tests logs and measured steps",
    "cc": "congestion-control (DCQCN, HPCC, TIMELY, Swift, predictive, Ultra Ethernet's "
    "NSCC and RCCC) and PFC or trimming dynamics",
    "cluster": "simulate a job trace: scheduling, interference, failures -> goodput",
    "collective": "collective time / algbw / busbw sweep (nccl-tests style)",
    "demo": "route and solve traffic on the default preset, write plots",
    "design": "search fabric designs (tiers, oversubscription, attachment, planes, NIC speed, "
    "scale-up, IB/RoCE) for a workload; Pareto front of cost vs step time",
    "fabric": "summary of a fabric preset or YAML spec",
    "fct": "flow completion times (fluid or packet fidelity) of a traffic pattern",
    "gpus": "list GPU presets (peak TFLOP/s, HBM, HBM bandwidth, host link)",
    "launch-args": "a step/optimize result's layout as Megatron-LM or NeMo arguments",
    "models": "list model presets (parameters, layers, hidden size, heads, experts)",
    "optimize": "search layouts, rank orders and placements for the shortest step",
    "presets": "list fabric presets",
    "report": "self-contained HTML design review of a job on a fabric",
    "step": "training step time, MFU and breakdown",
    "sweep": "run a parameter sweep (SPEC.yaml) into a resumable zarr store",
}


#: The modules of this package that are no command: shared by the commands and the CLI.
HELPERS = ("calibration_flags", "common", "interrupts")


def module_name(command: str) -> str:
    """The module of ``command`` (``launch-args`` -> ``fabricflow.commands.launch_args``)."""
    return f"{__name__}.{command.replace('-', '_')}"
