"""A hostile user's corpus of bad arguments over every command (``--set``, ``--collectives``,
sizes, fabrics): a usage error (exit 2) or a named error, never a traceback, in this process
and in a real one."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from fault_helpers import raises_named as _raises_named

from fabricflow.cli import main

FABRIC = "dgx-h100-superpod"


# ------------------------------------------------------------- step --set / --gpu-set


STEP = [
    "step",
    "--fabric",
    FABRIC,
    "--gpu",
    "h100-sxm",
    "--model",
    "llama3-8b",
    "--gpus",
    "16",
    "--tp",
    "2",
    "--micro-batch",
    "1",
    "--global-batch",
    "16",
    "--seq",
    "2048",
    "--collectives",
    "alpha-beta",
    "--json",
]


def _cli_json(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert len(lines) == 1, captured.out
    assert "Traceback" not in captured.err
    return code, json.loads(lines[0]), captured.err


@pytest.mark.parametrize(
    ("flag", "item", "words"),
    [
        ("--gpu-set", "hbm=[1", ["--gpu-set hbm", "not valid YAML"]),
        ("--gpu-set", "hbm=.nan", ["--gpu-set hbm", "finite"]),
        ("--gpu-set", "hbm=inf", ["--gpu-set hbm", "finite"]),
        ("--gpu-set", "compute_units=" + "9" * 40, ["--gpu-set compute_units", "64-bit"]),
        ("--gpu-set", "hbm=2024-01-01", ["--gpu-set hbm", "expected a number"]),
        ("--model-set", "num_hidden_layers=&a [*a]", ["--model-set num_hidden_layers", "alias"]),
        ("--model-set", "num_hidden_layers={a: 1, a: 2}", ["--model-set", "duplicate key"]),
        ("--model-set", "num_hidden_layers=" + "[" * 100 + "]" * 100, ["--model-set", "nested"]),
        ("--model-set", "num_hidden_layers=!!python/object:os.system x", ["--model-set"]),
        ("--model-set", "num_hidden_layers=1e300", ["num_hidden_layers", "64-bit"]),
        ("--model-set", "=4", ["--model-set", "FIELD=VALUE"]),
    ],
)
def test_step_set_values_go_through_the_safe_reader(capsys, flag, item, words):
    code, out, _ = _cli_json(capsys, *STEP, flag, item)
    assert code == 2 and out["error"] == "SpecError"
    for word in words:
        assert word in out["message"]


def test_step_set_numbers_are_decimal():
    from fabricflow.commands.step import _assignments

    assert _assignments(["a=010", "b=1.5", "c=1e9", "d=96GB", "e=true"], "--gpu-set") == {
        "a": 10,  # not YAML 1.1's octal 8
        "b": 1.5,
        "c": 1e9,
        "d": "96GB",
        "e": True,
    }
    for text in ("0x10", "1_000", "0o10", "0b1"):
        error = _raises_named(lambda t=text: _assignments([f"k={t}"], "--gpu-set"), "decimal")
        assert error.field == "--gpu-set k" and text in str(error)
    assert _assignments(["k=1:30"], "--gpu-set") == {"k": "1:30"}  # not base-60 90


def test_step_set_twice_is_refused_not_last_wins(capsys):
    code, out, _ = _cli_json(capsys, *STEP, "--gpu-set", "hbm=80GB", "--gpu-set", "hbm=10GB")
    assert code == 2 and "--gpu-set hbm: given twice" in out["message"]


def test_step_set_numbers_and_quantities_still_work(capsys):
    code, out, _ = _cli_json(
        capsys, *STEP, "--gpu-set", "hbm=96GB", "--model-set", "vocab_size=1.28e5"
    )
    assert code == 0 and out["collective_backend"] == "alpha-beta"


# ---------------------------------------------------------------- step --collectives


def test_step_help_offers_the_backend_names(capsys):
    with pytest.raises(SystemExit):
        main(["step", "--help"])
    text = capsys.readouterr().out
    assert "{fabric,alpha-beta}" in text and "collective-model" not in text


def test_step_former_backend_name_is_refused(capsys):
    args = [a if a != "alpha-beta" else "auto" for a in STEP]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused by the parser: no warning raised either
        code, out, _ = _cli_json(capsys, *args)
    assert (code, out["error"]) == (2, "UsageError")
    assert "--collectives: invalid choice: 'auto'" in out["message"]
    assert "deprecated" not in out["message"]


# ------------------------------------------------------------------- CLI, in-process

COLL = ["collective", "--fabric", FABRIC, "--op", "all_reduce", "--gpus", "16", "--json"]


COLL_SIZES = ["-b", "1MiB", "-e", "2MiB"]


CC = ["cc", "--scenario", "dumbbell", "--flows", "2", "--duration", "1ms", "--json"]


CLI_CASES = [
    # (id, argv, exit code, error class, words in the message)
    ("fabric unknown", ["fabric", "nope", "--json"], 2, "SpecError", ["fabric", "presets"]),
    ("fabric empty", ["fabric", "", "--json"], 2, "SpecError", ["fabric"]),
    ("fabric missing", ["fabric", "--json"], 2, "UsageError", ["fabric"]),
    ("presets extra", ["presets", "x", "--json"], 2, "UsageError", ["unrecognized"]),
    ("no command", ["--json"], 2, "UsageError", ["COMMAND"]),
    (
        "demo group 0",
        ["demo", "--fabric", FABRIC, "--group-size", "0", "--json"],
        2,
        "SpecError",
        ["group_size"],
    ),
    (
        "demo group huge",
        ["demo", "--fabric", FABRIC, "--group-size", "100000", "--json"],
        2,
        "SpecError",
        ["group_size"],
    ),
    ("demo group text", ["demo", "--group-size", "x", "--json"], 2, "UsageError", ["--group-size"]),
    ("collective op", [*COLL, "--op", "nope"], 2, "SpecError", ["op"]),
    ("collective gpus 1", [*COLL, "--gpus", "1"], 2, "SpecError", ["gpus", "2..1024"]),
    ("collective gpus huge", [*COLL, "--gpus", "99999999"], 2, "SpecError", ["gpus"]),
    ("collective gpus float", [*COLL, "--gpus", "2.5"], 2, "UsageError", ["--gpus"]),
    ("collective group 3", [*COLL, "--group-size", "3"], 2, "SpecError", ["group_size"]),
    ("collective min > max", [*COLL, "-b", "8MiB", "-e", "1MiB"], 2, "SpecError", ["maxbytes"]),
    ("collective size NaN", [*COLL, "-b", "nan"], 2, "SpecError", ["minbytes"]),
    ("collective size 0", [*COLL, "-b", "0", "-e", "0"], 2, "SpecError", ["minbytes"]),
    ("collective step 1", [*COLL, *COLL_SIZES, "-f", "1"], 2, "SpecError", ["stepfactor"]),
    ("collective step inf", [*COLL, *COLL_SIZES, "-f", "inf"], 2, "SpecError", ["--stepfactor"]),
    (
        "collective step tiny",
        [*COLL, "-b", "1", "-e", "1e24", "-f", "1.0000001"],
        2,
        "SpecError",
        ["stepfactor"],
    ),
    (
        "collective channels huge",
        [*COLL, *COLL_SIZES, "--channels", "100000000"],
        2,
        "SpecError",
        ["--channels", "1..64"],
    ),
    (
        "collective channels 0",
        [*COLL, *COLL_SIZES, "--channels", "0"],
        2,
        "SpecError",
        ["channels"],
    ),
    (
        "collective algorithm",
        [*COLL, *COLL_SIZES, "--algorithm", "x"],
        2,
        "SpecError",
        ["algorithm"],
    ),
    ("collective fail form", [*COLL, "--fail", "leaf"], 2, "SpecError", ["fail"]),
    ("collective fail 2", [*COLL, "--fail", "leaf:2"], 2, "SpecError", ["fraction"]),
    ("collective fail NaN", [*COLL, "--fail", "leaf:nan"], 2, "SpecError", ["fraction"]),
    ("collective fail kind", [*COLL, "--fail", "nope:0.1"], 2, "SpecError", ["link_kind"]),
    # beyond int64: refused by the parser (every integer option is an int64)
    (
        "collective seed huge",
        [*COLL, "--seed", str(2**70)],
        2,
        "UsageError",
        ["--seed", "too large"],
    ),
    ("step gpus 0", [*STEP, "--gpus", "0"], 2, "SpecError", ["--gpus"]),
    ("step gpus 15", [*STEP, "--gpus", "15"], 2, "SpecError", ["--dp", "divisible"]),
    ("step dp wrong", [*STEP, "--dp", "3"], 2, "SpecError", ["layout", "GPU count 16"]),
    ("step vpp -1", [*STEP, "--vpp", "-1"], 2, "SpecError", ["layout.vpp"]),
    ("step seq 0", [*STEP, "--seq", "0"], 2, "SpecError", ["layout.seq_len"]),
    (
        "step seq huge",
        [*STEP, "--seq", str(2**62)],
        2,
        "SpecError",
        ["layout.seq_len", "tokens per step"],
    ),
    ("step moe inf", [*STEP, "--moe-imbalance", "inf"], 2, "SpecError", ["layout.moe_imbalance"]),
    ("step interleaved", [*STEP, "--schedule", "interleaved"], 2, "SpecError", ["--schedule"]),
    ("step tp 2.0", [*STEP, "--tp", "2.0"], 2, "UsageError", ["--tp"]),
    (
        "step fp8 on A100",
        [*STEP, "--gpu", "a100-80gb", "--precision", "fp8"],
        2,
        "SpecError",
        ["precision"],
    ),
    (
        "step tp-overlap",
        [*STEP, "--tp-overlap", "--no-sequence-parallel"],
        2,
        "SpecError",
        ["layout.tp_overlap"],
    ),
    ("step backend", [*STEP, "--collectives", "nccl"], 2, "UsageError", ["--collectives"]),
    ("step unknown gpu field", [*STEP, "--gpu-set", "foo=1"], 2, "SpecError", ["gpu"]),
    ("cc flows 0", [*CC, "--flows", "0"], 2, "SpecError", ["--flows"]),
    ("cc flows huge", [*CC, "--flows", "100000000"], 2, "SpecError", ["flows", "limit"]),
    (
        "cc alltoall huge",
        [*CC, "--scenario", "alltoall", "--flows", "400"],
        2,
        "SpecError",
        ["flows", "limit"],
    ),
    ("cc duration 0", [*CC, "--duration", "0"], 2, "SpecError", ["--duration"]),
    ("cc duration huge", [*CC, "--duration", "1e9s"], 2, "SpecError", ["max_work"]),
    ("cc dt tiny", [*CC, "--dt", "1e-30"], 2, "SpecError", ["duration", "max_work"]),
    ("cc dt big", [*CC, "--dt", "1s"], 2, "SpecError", ["dt", "stable"]),
    ("cc set NaN", [*CC, "--set", "kmax=nan"], 2, "SpecError", ["kmax"]),
    ("cc set g 0", [*CC, "--set", "g=0"], 2, "SpecError", ["params.g"]),
    ("cc set g 1/0", [*CC, "--set", "g=1/0"], 2, "SpecError", ["params.g"]),
    ("cc preset", [*CC, "--params", "x"], 2, "SpecError", ["params"]),
    ("cc bandwidth 0", [*CC, "--link-bandwidth", "0"], 2, "SpecError", ["--link-bandwidth"]),
    ("cc size -1", [*CC, "--size", "-1"], 2, "SpecError", ["--size"]),
    ("cc delay -1us", [*CC, "--delay", "-1us"], 2, "SpecError", ["--delay"]),
    ("cc max-work NaN", [*CC, "--max-work", "nan"], 2, "SpecError", ["max_work"]),
    ("cc ring 1", [*CC, "--scenario", "ring", "--flows", "1"], 2, "SpecError", ["flows"]),
    ("bench flag", ["bench", "--quick", "--x", "--json"], 2, "UsageError", ["--x"]),
    # "dcqcn", the name of section cc before 0.1.0, is refused like any unknown section
    ("bench former", ["bench", "dcqcn", "--quick", "--json"], 2, "SpecError", ["dcqcn", "'cc'"]),
]


@pytest.mark.parametrize(("argv", "code", "error", "words"), [c[1:] for c in CLI_CASES],
                         ids=[c[0] for c in CLI_CASES])  # fmt: skip
def test_cli_bad_input(capsys, argv, code, error, words):
    got, out, _ = _cli_json(capsys, *argv)
    assert (got, out["error"]) == (code, error), out
    for word in words:
        assert word in out["message"], out["message"]


def test_cc_feedback_delay_far_beyond_the_run_finishes(capsys):
    code, out, _ = _cli_json(capsys, *CC, "--delay", "100s", "--duration", "0.2ms")
    assert code == 0 and out["delay_s"] == 100.0


# ------------------------------------------------------------------ CLI, subprocess


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*STEP, "--model-set", "num_hidden_layers=&a [*a]"], ["--model-set", "alias"]),
        ([*CC, "--flows", "100000000"], ["flows", "limit"]),
    ],
)
def test_cli_bad_input_in_a_real_process(argv, words):
    proc = subprocess.run(
        [sys.executable, "-m", "fabricflow.cli", *[a for a in argv if a != "--json"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr
