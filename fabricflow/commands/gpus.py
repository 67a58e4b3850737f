"""``fabricflow gpus``: list the shipped GPU presets with their key facts."""

from __future__ import annotations

from fabricflow.commands.common import add_json_flag, print_json, print_table
from fabricflow.workload.gpu import list_gpus, load_gpu


def register(parser) -> None:
    parser.description = (
        "List the GPU presets that --gpu takes: dense peak bf16 and fp8 "
        "TFLOP/s, HBM capacity and bandwidth, compute units and the host link."
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def gpu_facts(gpu) -> dict:
    """Key facts of a :class:`GpuSpec` in SI units: ``peak_bf16_flops``,
    ``peak_fp8_flops`` (dense FLOP/s), ``hbm_bytes``, ``hbm_Bps``, ``compute_units``,
    ``host_link`` and ``host_link_Bps`` (per direction)."""
    return {
        "name": gpu.name,
        "peak_bf16_flops": gpu.peak_bf16,
        "peak_fp8_flops": gpu.peak_fp8,
        "hbm_bytes": gpu.hbm,
        "hbm_Bps": gpu.hbm_bandwidth,
        "compute_units": gpu.compute_units,
        "host_link": gpu.host_link,
        "host_link_Bps": gpu.host_link_bandwidth,
    }


def run(args) -> int:
    rows = [gpu_facts(load_gpu(name)) for name in list_gpus()]
    if args.json:
        print_json({"gpus": rows})
        return 0
    print_table(
        [
            {
                "gpu": row["name"],
                "bf16": f"{row['peak_bf16_flops'] / 1e12:,.0f}",
                "fp8": f"{row['peak_fp8_flops'] / 1e12:,.0f}" if row["peak_fp8_flops"] else "-",
                "hbm": f"{row['hbm_bytes'] / 2**30:.1f}",
                "hbm_bw": f"{row['hbm_Bps'] / 1e12:.2f}",
                "units": row["compute_units"],
                "host": f"{row['host_link']} {row['host_link_Bps'] / 1e9:g} GB/s"
                if row["host_link_Bps"]
                else "-",
            }
            for row in rows
        ],
        [
            ("gpu", "gpu"),
            ("bf16", "bf16 TFLOP/s"),
            ("fp8", "fp8 TFLOP/s"),
            ("hbm", "HBM GiB"),
            ("hbm_bw", "HBM TB/s"),
            ("units", "units"),
            ("host", "host link"),
        ],
        names=1,
    )
    return 0
