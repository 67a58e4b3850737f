"""Readers of the public GPU-cluster traces on small files written in their schemas:
Alibaba PAI 2020 (headerless task and job tables) and the 2023 pod list, Microsoft Philly
(JSON job log), SenseTime Helios and Shanghai AI Lab Acme (Seren and Kalos). Fractional-GPU
and CPU-only rows are skipped and counted (or rounded up), never silently dropped."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cluster.public_traces import detect_format
from fabricflow.cluster.trace import load_trace
from fabricflow.errors import SpecError


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_pai_2020_tables_group_tasks_into_jobs(tmp_path):
    folder = tmp_path / "pai"
    folder.mkdir()
    # job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type
    _write(
        folder / "pai_task_table.csv",
        "jA,worker,2.0,Terminated,1000.0,4600.0,600.0,29.3,100.0,V100\n"
        "jB,ps,1.0,Terminated,2000.0,9200.0,400.0,10.0,,MISC\n"
        "jB,worker,4.0,Terminated,2010.0,9200.0,600.0,29.3,100.0,V100\n"
        "jC,worker,1.0,Terminated,3000.0,3500.0,600.0,29.3,50.0,T4\n"
        "jD,tensorflow,1.0,Terminated,3000.0,3600.0,600.0,29.3,,\n"
        "jE,worker,1.0,Running,5000.0,,600.0,29.3,100.0,V100\n",
    )
    # job_name,inst_id,user,status,start_time,end_time (start_time = submission)
    _write(
        folder / "pai_job_table.csv",
        "jA,i1,u1,Terminated,900.0,4600.0\njB,i2,u1,Terminated,1500.0,9200.0\n",
    )
    assert detect_format(str(folder)) == "pai-2020"
    trace = load_trace(str(folder))
    assert trace.format == "pai-2020"
    assert [(job.id, job.gpus) for job in trace] == [("jA", 2), ("jB", 4)]
    a, b = trace
    assert a.arrival_s == 0.0 and b.arrival_s == 600.0  # submissions 900 and 1500
    assert a.duration_s == 3600.0 and b.duration_s == 7200.0
    counts = trace.counts
    assert counts["rows"] == 5 and counts["jobs"] == 2
    assert counts["fractional_gpu"] == 1 and counts["cpu_only"] == 1 and counts["unfinished"] == 1
    rounded = load_trace(str(folder), fractional="round-up")
    assert ("jC", 1) in [(job.id, job.gpus) for job in rounded]
    assert rounded.counts["fractional_rounded_up"] == 1 and rounded.counts["fractional_gpu"] == 0


def test_pai_2023_pod_list(tmp_path):
    path = _write(
        tmp_path / "openb_pod_list_default.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497\n"
        "openb-pod-0022,4000,15258,1,220,,BE,Running,9679175,9973826,9679175\n"
        "openb-pod-0005,20000,65536,0,0,,LS,Running,2759674,12902960,2759676\n"
        "openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,\n"
        "openb-pod-0026,16000,32768,1,1000,,BE,Running,9924220,9964972,9924222\n",
    )
    trace = load_trace(path)
    assert trace.format == "pai-2023"
    assert [(job.id, job.gpus, job.priority) for job in trace] == [
        ("openb-pod-0017", 8, 1),
        ("openb-pod-0026", 1, 0),
    ]
    assert trace[0].duration_s == 10769854 - 9437497
    assert trace[1].arrival_s == 9924220 - 9437497
    c = trace.counts
    assert (c["fractional_gpu"], c["cpu_only"], c["never_started"]) == (1, 1, 1)
    assert c["states"]["Running"] == 3


def test_philly_job_log(tmp_path):
    def attempt(start, end, servers):
        return {
            "start_time": start,
            "end_time": end,
            "detail": [
                {"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(8)]} for i in range(servers)
            ],
        }

    jobs = [
        {
            "status": "Pass",
            "vc": "ee9e8c",
            "jobid": "application_1",
            "attempts": [
                attempt("2017-10-07 01:12:09", "2017-10-07 01:13:23", 1),
                attempt("2017-10-07 01:13:30", "2017-10-07 02:13:30", 2),
            ],
            "submitted_time": "2017-10-07 01:11:39",
            "user": "ce2f4c",
        },
        {
            "status": "Killed",
            "vc": "x",
            "jobid": "application_2",
            "attempts": [],
            "submitted_time": "2017-10-07 03:00:00",
            "user": "u",
        },
        {
            "status": "Pass",
            "vc": "x",
            "jobid": "application_3",
            "attempts": [attempt("2017-10-08 00:00:00", None, 1)],
            "submitted_time": "2017-10-07 23:00:00",
            "user": "u",
        },
    ]
    path = _write(tmp_path / "cluster_job_log", json.dumps(jobs))
    trace = load_trace(path)
    assert trace.format == "philly"
    (job,) = trace
    assert job.id == "application_1" and job.gpus == 16 and job.duration_s == 3600.0
    assert trace.counts["never_started"] == 1 and trace.counts["unfinished"] == 1


def test_helios_cluster_log(tmp_path):
    path = _write(
        tmp_path / "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u1,vcA,8,48,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:10,2020-04-01 01:00:10,3600,10\n"
        "2,u1,vcA,0,4,1,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:10:01,2020-04-01 00:20:01,600,1\n"
        "3,u2,vcB,16,96,2,FAILED,2020-04-01 00:30:00,2020-04-01 00:31:00,2020-04-01 00:41:00,600,60\n"
        "4,u2,vcB,1,6,1,CANCELLED,2020-04-01 00:40:00,2020-04-01 00:40:00,2020-04-01 00:40:00,0,0\n",
    )
    trace = load_trace(path)
    assert trace.format == "helios"
    assert [(job.id, job.gpus, job.arrival_s, job.duration_s) for job in trace] == [
        ("1", 8, 0.0, 3600.0),
        ("3", 16, 1800.0, 600.0),
    ]
    assert trace.counts["cpu_only"] == 1 and trace.counts["zero_duration"] == 1
    assert trace.counts["states"] == {"COMPLETED": 2, "FAILED": 1, "CANCELLED": 1}


def test_acme_seren_and_kalos(tmp_path):
    seren = _write(
        tmp_path / "trace_seren.csv",
        "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,"
        "duration,queue,gpu_time\n"
        "5778432,u5907,1,8,128,Other,FAILED,2023-03-01 00:18:22+08:00,"
        "2023-03-01 00:18:54+08:00,2023-03-01 00:20:51+08:00,117,32,936.0\n"
        "5778469,u5907,1,8,128,Other,COMPLETED,2023-03-01 00:23:58+08:00,"
        "2023-03-01 00:24:11+08:00,2023-03-01 01:09:04+08:00,2693,13,21544.0\n"
        "5778470,u1,1,0,16,Eval,COMPLETED,2023-03-01 00:30:00+08:00,"
        "2023-03-01 00:30:00+08:00,2023-03-01 00:31:00+08:00,60,0,0.0\n",
    )
    trace = load_trace(seren)
    assert trace.format == "acme"
    assert [(job.id, job.duration_s) for job in trace] == [("5778432", 117.0), ("5778469", 2693.0)]
    assert trace[1].arrival_s == 336.0 and trace.counts["cpu_only"] == 1
    kalos = _write(
        tmp_path / "trace_kalos.csv",
        "job_id,user,node_num,gpu_num,cpu_num,mem_per_pod_GB,shared_mem_per_pod,type,state,"
        "submit_time,start_time,end_time,fail_time,stop_time,duration,queue,gpu_time\n"
        "dlctk696s0jbvitv,uf794,8,64,960,1000,100.0,Other,FAILED,2023-05-17 11:00:58+00:00,"
        "2023-05-17 11:01:08+00:00,2023-05-17 11:01:16+00:00,2023-05-17 11:01:16+00:00,,18,10.0,1152.0\n",
    )
    (job,) = load_trace(kalos)
    assert job.gpus == 64 and job.duration_s == 8.0


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        (
            "7,u,vc,-8,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:01,2020-04-01 00:01:00,59,1",
            "jobs[0] (id '7').gpu_num",
            "finite number >= 0",
        ),
        (
            "7,u,vc,two,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:01,2020-04-01 00:01:00,59,1",
            "jobs[0] (id '7').gpu_num",
            "expected a number",
        ),
        (
            "7,u,vc,8,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:10:00,2020-04-01 00:01:00,0,0",
            "jobs[0] (id '7').end_time",
            "ends before",
        ),
        (
            "7,u,vc,8,1,1,COMPLETED,yesterday,2020-04-01 00:10:00,2020-04-01 00:11:00,60,0",
            "jobs[0] (id '7').submit_time",
            "expected a time",
        ),
        (
            "7,u,vc,8,1,1,COMPLETED,,2020-04-01 00:10:00,2020-04-01 00:11:00,60,0",
            "jobs[0] (id '7').submit_time",
            "missing",
        ),
    ],
)
def test_impossible_rows_name_the_row_and_column(tmp_path, line, field, message):
    path = _write(
        tmp_path / "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        + line
        + "\n",
    )
    with pytest.raises(SpecError, match=message) as info:
        load_trace(path)
    assert info.value.field == field


def test_public_traces_simulate_and_skip_what_the_cluster_cannot_hold(tmp_path):
    path = _write(
        tmp_path / "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,8,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:30:00,1800,0\n"
        "2,u,vc,12,1,2,COMPLETED,2020-04-01 00:05:00,2020-04-01 00:05:00,2020-04-01 00:35:00,1800,0\n"
        "3,u,vc,2048,1,256,COMPLETED,2020-04-01 00:06:00,2020-04-01 00:06:00,2020-04-01 00:36:00,1800,0\n",
    )
    fabric = ff.load_fabric("dgx-h100-superpod")
    trace = load_trace(path, fabric=fabric)
    assert [job.gpus for job in trace] == [8, 12] and trace.counts["larger_than_cluster"] == 1
    run = ff.simulate_cluster(fabric, trace, scheduler="packed", interference=False)
    assert run.cluster["jobs_done"] == 2
    for job in run.jobs:
        assert job["end_s"] - job["start_s"] == pytest.approx(1800.0, rel=1e-6, abs=30.0)
    with pytest.raises(SpecError, match="format"):
        load_trace(path, format="slurm")
