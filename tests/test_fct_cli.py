"""``fabricflow fct``, htsim connection matrices and the command's JAX compilation cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.traffic.htsim import read_connection_matrix, write_connection_matrix
from fabricflow.traffic.patterns import incast_flows, permutation_flows

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_fct_json_and_out(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["fct", "--fabric", "fat-tree-k16", "--traffic", "permutation", "--hosts", "16"]
    assert main([*argv, "--size", "1234567B", "--json", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)  # exactly one object
    assert report["flows"] == 16 and report["fidelity"] == "packet"
    assert report["arbitration"] == "fifo"
    assert set(report["fct_us"]) == {"p50", "p90", "p99", "max", "mean"}
    assert {"build", "route", "solve", "total"} <= set(report["seconds"])
    assert report["fct_us"]["p50"] >= 1234567 / 50e9 * 1e6  # at least the line-rate time
    assert sum(report["dominant"].values()) == 16
    assert sorted(os.listdir(out)) == ["fct_cdf.png", "flows.csv", "summary.json"]
    rows = (out / "flows.csv").read_text().splitlines()
    assert len(rows) == 17 and "fct_fluid_us" in rows[0] and "fct_packet_us" in rows[0]
    table = np.genfromtxt(out / "flows.csv", delimiter=",", names=True, usecols=range(15))
    assert np.all(table["fct_packet_us"] >= table["fct_fluid_us"] * 0.9)
    median = np.percentile(table["fct_packet_us"], 50)
    assert median == report["fct_us"]["p50"]  # the CSV holds the exact numbers
    sizes = [row.split(",")[rows[0].split(",").index("size_bytes")] for row in rows[1:]]
    assert sizes == ["1234567"] * 16  # integers as integers


def test_fct_reads_an_htsim_matrix(tmp_path, capsys):
    path = tmp_path / "flows.cm"
    write_connection_matrix(path, 8, [0, 1, 2], [3, 3, 4], [2e6, 1e6, 5e5], [0, 5e-6, 0])
    matrix = read_connection_matrix(path)
    np.testing.assert_array_equal(matrix.src, [0, 1, 2])
    np.testing.assert_allclose(matrix.start, [0, 5e-6, 0])
    argv = ["fct", "--fabric", "fat-tree-k16", "--traffic", str(path), "--fidelity", "fluid"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["flows"] == 3 and report["traffic"]["kind"] == "file"
    # the 0.5 MB flow alone on its path: 10 us at 400 Gb/s plus 2 x 4 hops x 1 us
    assert report["fct_us"]["p50"] > 10


BAD_FILES = [
    ("Nodes 4\nConnections 1\n0->9 id 1 start 0 size 10\n", "line 3: host '9' is not in 0..3"),
    ("Nodes 4\nConnections 1\n0->1 id 1 start 0 size 0\n", "line 3: size must be"),
    ("Nodes 4\nConnections 1\n\n0->1 id 1 start 0 size -5\n", "line 4: size must be"),
    ("Nodes 4\nConnections 1\n0->1 id 1 start -1 size 5\n", "line 3: start must be"),
    ("Nodes 4\nConnections 1\n0->1 id 1 start 0 size 5 trigger 2\n", "unsupported field"),
    ("Nodes 4\nConnections 1\n0-1 id 1 start 0 size 5\n", "line 3: expected 'SRC->DST"),
    ("Nodes 4\nConnections 1\n2->2 id 1 start 0 size 5\n", "line 3: a flow from host 2"),
    ("0->1 id 1 start 0 size 5\n", "line 1: expected the 'Nodes N'"),
    ("Nodes 4\nConnections 2\n0->1 id 1 start 0 size 5\n", "'Connections 2' but 1"),
    ("Nodes 4\nConnections 2\n0->1 id 1 start 0 size 5\n1->2 id 1 start 0 size 5\n", "id 1"),
    ("Nodes 4\nConnections 1\n0->1 id 1 start 0\n", "line 3: missing field 'size'"),
    (
        "Nodes 4\nConnections 1\n0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 5\n",
        "line 4: more",
    ),
    # numbers beyond int64 are named, not an OverflowError
    ("Nodes 4\nConnections 1\n0->99999999999999999999 id 1 start 0 size 5\n", "line 3: host"),
    ("Nodes 99999999999999999999\nConnections 1\n", "line 1: 'Nodes 99999999999999999999'"),
    ("Nodes 4\nConnections 1\n0->1 id 99999999999999999999 start 0 size 5\n", "line 3: id"),
    ("Nodes \u00b2\nConnections 1\n", "line 1: expected 'Nodes <count>'"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_matrix_names_the_line(tmp_path, text, message):
    path = tmp_path / "bad.cm"
    path.write_text(text)
    with pytest.raises(ff.SpecError) as error:
        read_connection_matrix(path)
    assert error.value.field == "traffic" and message in str(error.value)


def test_a_huge_matrix_is_refused_from_its_header(tmp_path):
    """10^7 flows are refused at the Connections line, before any flow line is read, with
    what parsing them would need; a header that undercounts stops at the first extra line."""
    path = tmp_path / "huge.cm"
    with path.open("w") as handle:
        handle.write("Nodes 8192\nConnections 10000000\n")
        handle.writelines(f"{i % 8}->{i % 8 + 1} id {i} start 0 size 9\n" for i in range(1000))
    with pytest.raises(ff.SpecError, match=r"line 2: 'Connections 10,000,000' is more than"):
        read_connection_matrix(path)
    with pytest.raises(ff.SpecError, match=r"\d GB"):
        read_connection_matrix(path)
    with pytest.raises(ff.SpecError, match="'Connections 10000000' but 1000 flow line"):
        read_connection_matrix(path, max_flows=10**7)  # allowed: then read to the end
    path.write_text("Nodes 8192\nConnections 2\n" + "0->1 id 1 start 0 size 9\n" * 1000)
    with pytest.raises(ff.SpecError, match="line 5: more flow lines than 'Connections 2'"):
        read_connection_matrix(path)


def test_fct_bad_inputs_exit_2(tmp_path, capsys):
    path = tmp_path / "big.cm"
    path.write_text("Nodes 2048\nConnections 1\n0->1 id 1 start 0 size 10\n")
    for extra in (
        ["--traffic", str(path)],
        ["--traffic", "nonsense"],
        ["--traffic", "permutation", "--size", "0"],
        ["--traffic", "permutation", "--pfc", "off"],
        ["--traffic", "incast", "--senders", "0"],
        ["--traffic", "permutation", "--seed", "-1"],
        ["--traffic", "incast", "--seed", "-1"],
    ):
        assert main(["fct", "--fabric", "fat-tree-k16", *extra, "--json"]) == 2
        report = json.loads(capsys.readouterr().out)
        assert report["error"] == "SpecError", extra


def test_fct_pfc_thresholds_use_the_set_spelling_of_cc(capsys):
    """PFC thresholds are ``--set pfc.xoff=...`` in ``fct`` as in ``cc``: one spelling."""
    argv = ["fct", "--fabric", "fat-tree-k16", "--traffic", "incast", "--senders", "4"]
    assert main([*argv, "--set", "pfc.xoff=50KB", "--set", "pfc.hysteresis=5KB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flows"] == 4
    assert main([*argv, "--set", "pfc.xoff=0", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["error"] == "SpecError" and "pfc.xoff" in report["message"]
    assert main([*argv, "--set", "kmax=400KB", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["error"] == "SpecError" and "kmax" in report["message"]
    assert main([*argv, "--pfc-xoff", "50KB"]) == 2  # the former flag is gone
    assert "unknown option --pfc-xoff" in capsys.readouterr().err


def test_traffic_patterns():
    src, dst = permutation_flows(50, seed=4)
    assert np.all(src != dst) and sorted(dst) == list(range(50))
    src, dst = incast_flows(10, 4, receiver=3, seed=1)
    assert len(set(src.tolist())) == 4 and 3 not in src and np.all(dst == 3)
    with pytest.raises(ff.SpecError):
        permutation_flows(1)


def _without_jax_settings() -> dict:
    """This environment less the JAX settings a developer may have exported."""
    return {key: value for key, value in os.environ.items() if not key.startswith("JAX_")}


def _run(code: str, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**_without_jax_settings(), "PYTHONPATH": REPO, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return done.stdout


def test_jax_cache_folder_and_opt_out(tmp_path):
    code = (
        "import os, sys\nfrom fabricflow.jax_cache import enable_persistent_cache\n"
        "print(enable_persistent_cache(), os.environ.get('JAX_COMPILATION_CACHE_DIR'), "
        "'jax' in sys.modules)"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "FABRICFLOW_NO_JAX_CACHE": ""}
    folder = str(tmp_path / "fabricflow" / "jax")
    assert _run(code, env).split() == [folder, folder, "False"]  # and JAX not imported
    opted_out = _run(code, {**env, "FABRICFLOW_NO_JAX_CACHE": "1"})
    assert opted_out.split() == ["None", "None", "False"]
    mine = str(tmp_path / "mine")
    assert _run(code, {**env, "JAX_COMPILATION_CACHE_DIR": mine}).split()[:2] == [mine, mine]


def test_the_command_fills_the_cache(tmp_path):
    # packet fidelity runs the jitted PFC engine (fluid completion on a CPU compiles nothing)
    env = {"XDG_CACHE_HOME": str(tmp_path), "FABRICFLOW_NO_JAX_CACHE": ""}
    code = (
        "import sys\nfrom fabricflow.cli import main\nsys.argv = ['fabricflow', 'fct', "
        "'--fabric', 'fat-tree-k16', '--traffic', 'incast', '--senders', '3', '--fidelity', "
        "'packet', '--json']\nsys.exit(main())"
    )
    assert json.loads(_run(code, env))["flows"] == 3
    assert os.listdir(tmp_path / "fabricflow" / "jax")
