"""Job traces: YAML/CSV loading, row-and-field errors, synthetic traces."""

from __future__ import annotations

import os

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cluster.trace import load_trace, parse_duration, synthetic_trace
from fabricflow.errors import SpecError
from fabricflow.workload.gpu_memory import rank_memory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = {
    "id": "ft-8b",
    "model": "llama3-8b",
    "gpu": "h100-sxm",
    "gpus": 16,
    "layout": {"tp": 8, "micro_batch": 1, "global_batch": 16, "seq": 8192},
    "arrival": "30m",
    "steps": 100,
    "priority": 2,
}


def test_yaml_row_becomes_a_jobspec():
    (job,) = load_trace([ROW])
    assert job.id == "ft-8b" and job.gpus == 16 and job.priority == 2
    assert job.layout.tp == 8 and job.layout.dp == 2 and job.layout.seq_len == 8192
    assert job.arrival_s == 1800.0 and job.steps == 100 and job.duration_s is None
    assert job.model.name == "llama3-8b" and job.gpu.name == "h100-sxm"


def test_example_trace_loads_and_fits_its_fabric():
    fabric = ff.load_fabric("dgx-h100-superpod")
    jobs = load_trace(os.path.join(REPO, "studies", "cluster_trace.yaml"), fabric=fabric)
    assert len(jobs) == 10
    assert {1, 2, 4} <= {job.gpus for job in jobs}  # fine-grained slicing is exercised
    assert len({job.priority for job in jobs}) >= 2


def test_csv_with_the_same_columns(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(
        "id,model,gpu,gpus,tp,pp,micro_batch,global_batch,seq,arrival,steps,duration,priority\n"
        "a,llama3-8b,h100-sxm,16,8,1,1,16,8192,0s,50,,0\n"
        "b,megatron-1.7b,h100-sxm,2,1,1,2,8,2048,1h,,2h,1\n"
    )
    first, second = load_trace(str(path))
    assert first.layout.dp == 2 and first.steps == 50
    assert second.duration_s == 7200.0 and second.arrival_s == 3600.0 and second.priority == 1
    # the CSV and YAML forms of the same row give the same job
    (same,) = load_trace([{**ROW, "id": "a", "arrival": 0, "steps": 50, "priority": 0}])
    assert same.layout == first.layout


def test_durations():
    assert parse_duration("3d", "x") == 3 * 86400
    assert parse_duration("12h", "x") == 43200
    assert parse_duration("30m", "x") == 1800
    assert parse_duration("45s", "x") == 45
    assert parse_duration("1h30m", "x") == 5400
    assert parse_duration(7.5, "x") == 7.5
    for bad in ("-1h", "3 parsecs", "nan", None, True, "1e400s"):
        with pytest.raises(SpecError, match="x"):
            parse_duration(bad, "x")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"gpus": -8}, "gpus", "positive integer"),
        ({"gpus": 0}, "gpus", "positive integer"),
        ({"model": "llama9-1t"}, "model", "llama3-8b"),  # lists the allowed presets
        ({"gpu": "h900"}, "gpu", "h100-sxm"),
        ({"layout": {"tp": 3, "seq": 4096}}, "layout", "does not divide"),
        ({"layout": {"tp": 8, "tpp": 2}}, "layout.tpp", "unknown layout key"),
        ({"arrival": "soon"}, "arrival", "duration"),
        ({"duration": "2h"}, "steps", "exactly one of steps or duration"),
        ({"steps": -5}, "steps", "positive integer"),
        ({"priority": "high"}, "priority", "integer"),
        ({"colour": "red"}, "colour", "unknown key"),
    ],
)
def test_bad_rows_name_the_row_and_field(change, field, message):
    rows = [dict(ROW, id="ok"), {**ROW, **change}]
    with pytest.raises(SpecError, match=message) as info:
        load_trace(rows)
    assert info.value.field.startswith("jobs[1] (id 'ft-8b')")
    assert info.value.field.endswith(field) or f".{field}" in info.value.field


def test_job_larger_than_the_cluster_and_duplicates():
    fabric = ff.load_fabric("dgx-h100-superpod")
    with pytest.raises(SpecError, match="larger than the cluster") as info:
        load_trace([{**ROW, "gpus": 2048, "layout": {"tp": 8}}], fabric=fabric)
    assert info.value.field == "jobs[0] (id 'ft-8b').gpus"
    with pytest.raises(SpecError, match="duplicate id"):
        load_trace([ROW, ROW])
    with pytest.raises(SpecError, match="needs the fabric"):
        load_trace([{**ROW, "layout": "optimize"}])


def test_layout_memory_errors_name_the_row():
    from fabricflow.cluster.simulate import simulate_cluster

    fabric = ff.load_fabric("dgx-h100-superpod")
    # 8B on one GPU without sharding does not fit 80 GB: the row is named
    row = {**ROW, "gpus": 1, "layout": {"tp": 1, "micro_batch": 1, "global_batch": 1}}
    with pytest.raises(SpecError, match="GiB") as info:
        simulate_cluster(fabric, [row], scheduler="first-fit", interference=False)
    assert info.value.field.startswith("jobs[0] (id 'ft-8b')")


def test_synthetic_trace_is_seeded_and_realistic():
    fabric = ff.load_fabric("dgx-h100-superpod")
    jobs = synthetic_trace(300, seed=7, fabric=fabric, mean_interarrival_s=600.0)
    again = synthetic_trace(300, seed=7, fabric=fabric, mean_interarrival_s=600.0)
    assert [j.to_dict() for j in jobs] == [j.to_dict() for j in again]
    sizes = np.array([job.gpus for job in jobs])
    assert np.all(sizes & (sizes - 1) == 0) and sizes.max() <= fabric.num_gpus
    assert {1, 2, 4} <= set(sizes.tolist())
    # many small jobs, few large ones
    assert np.mean(sizes <= 8) > 0.4 and np.mean(sizes >= 256) < 0.25
    gaps = np.diff([job.arrival_s for job in jobs])
    assert np.all(gaps >= 0) and 450 < gaps.mean() < 750  # exponential, mean 600 s
    assert all(job.layout.num_gpus == job.gpus for job in jobs)
    assert {job.priority for job in jobs} == {0, 1}


def test_every_synthetic_shape_fits_in_hbm():
    sizes = tuple(2**k for k in range(15))  # 1 .. 16,384 GPUs
    jobs = synthetic_trace(2000, seed=0, sizes=sizes, size_exponent=0.0)
    seen = {}
    for job in jobs:
        seen.setdefault(job.gpus, job)
    assert sorted(seen) == list(sizes)
    for job in seen.values():
        worst = max(m.total for m in rank_memory(job.model, job.layout))
        assert worst < job.gpu.hbm, (job.gpus, job.model.name, worst / 2**30)


def test_synthetic_bad_input():
    with pytest.raises(SpecError, match="num_jobs"):
        synthetic_trace(0)
    with pytest.raises(SpecError, match="powers of two"):
        synthetic_trace(5, sizes=(3, 8))
    with pytest.raises(SpecError, match="mean_interarrival_s"):
        synthetic_trace(5, mean_interarrival_s=-1.0)


@pytest.mark.slow
def test_layout_optimize_runs_the_layout_search():
    fabric = ff.load_fabric("dgx-h100-superpod")
    row = {"id": "o", "model": "megatron-1.7b", "gpu": "h100-sxm", "gpus": 8, "steps": 10}
    first, second = load_trace(
        [
            {**row, "layout": "optimize"},
            {**row, "id": "p", "layout": {"optimize": True, "seq": 4096, "global_batch": 8}},
        ],
        fabric=fabric,
    )
    assert first.layout.num_gpus == 8 and first.layout == second.layout  # cached search
    with pytest.raises(SpecError, match="layout.tp"):
        load_trace([{**row, "layout": {"optimize": True, "tp": 2}}], fabric=fabric)
