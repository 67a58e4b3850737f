"""Traces too large to simulate or read in two minutes are refused before the work, with
their size and the limit (10^6-job synthetic, CSV and PAI task tables ran for hours)."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.cluster import simulate, trace_files
from fabricflow.cluster.public_traces import read_public_trace
from fabricflow.cluster.synthetic import synthetic_trace
from fabricflow.cluster.trace import load_trace
from fabricflow.errors import SpecError


def test_a_million_synthetic_jobs_are_refused_at_once(capsys):
    argv = ["cluster", "--fabric", "dgx-h100-superpod", "--synthetic", "1000000", "--json"]
    assert main(argv) == 2
    message = json.loads(capsys.readouterr().out)["message"]
    assert message.startswith("--synthetic: the trace holds 1,000,000 jobs")
    assert "over the limit of 20,000" in message and "min of CPU" in message


def test_the_simulator_refuses_a_trace_over_the_limit_before_running(monkeypatch):
    fabric = ff.load_fabric("dgx-h100-superpod")
    jobs = synthetic_trace(6, seed=0, fabric=fabric)
    monkeypatch.setattr(simulate, "MAX_SIMULATED_JOBS", 5)

    def no_run(self):
        raise AssertionError("the simulation started")

    monkeypatch.setattr(simulate._Simulator, "run", no_run)
    with pytest.raises(SpecError, match="holds 6 jobs, over the limit of 5") as error:
        ff.simulate_cluster(fabric, jobs)
    assert error.value.field == "trace"


ROWS = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time\n" + "".join(
    f"j{i},u,vc,8,4,1,COMPLETED,{i},{i + 1},{i + 100}\n" for i in range(30)
)


@pytest.mark.parametrize("kind", ["helios", "fabricflow"])
def test_a_csv_trace_over_the_row_limit_is_refused_before_reading(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(trace_files, "MAX_TRACE_ROWS", 20)  # read where checked
    path = tmp_path / "big.csv"
    if kind == "helios":
        path.write_text(ROWS)
        call = lambda: read_public_trace(str(path), "helios")  # noqa: E731
    else:
        rows = "".join(f"j{i},llama3-8b,h100-sxm,8,8,1,8192,0,10\n" for i in range(30))
        path.write_text("id,model,gpu,gpus,tp,micro_batch,seq,arrival,steps\n" + rows)
        call = lambda: load_trace(str(path))  # noqa: E731
    with pytest.raises(SpecError, match="holds about 30 rows, over the limit of 20"):
        call()
