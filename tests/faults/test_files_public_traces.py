"""Public cluster traces with cells no scheduler writes (infinite or underscored times, a
Philly GPU list that is a number or a string) are refused, naming the row and column;
they raised OverflowError, hung, raised TypeError or were miscounted."""

from __future__ import annotations

import json

import pytest

from fabricflow.cluster.public_traces import read_public_trace
from fabricflow.errors import SpecError

HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time\n"
GOOD = "1,u,vc,8,4,1,COMPLETED,100,110,400\n"


@pytest.mark.parametrize(
    ("row", "field", "words"),
    [
        ("7,u,vc,8,4,1,COMPLETED,100,110,inf", "end_time", "got 'inf'"),
        ("7,u,vc,8,4,1,COMPLETED,100,110,-inf", "end_time", "got '-inf'"),
        ("7,u,vc,8,4,1,COMPLETED,100,-inf,400", "start_time", "got '-inf'"),
        ("7,u,vc,8,4,1,COMPLETED,100,110,1e400", "end_time", "beyond the float range"),
        ("7,u,vc,8,4,1,COMPLETED,100,110,4_00", "end_time", "got '4_00'"),
        ("7,u,vc,8,4,1,COMPLETED,100,110,-5", "end_time", "finite and >= 0"),
        ("7,u,vc,inf,4,1,COMPLETED,100,110,400", "gpu_num", "'inf'"),
        ("7,u,vc,1_6,4,1,COMPLETED,100,110,400", "gpu_num", "'1_6'"),
    ],
)
def test_helios_cells_no_scheduler_writes_are_refused(tmp_path, row, field, words):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HEADER + GOOD + row + "\n")
    with pytest.raises(SpecError) as error:
        read_public_trace(str(path), "helios")
    assert error.value.field == f"jobs[1] (id '7').{field}", str(error.value)
    assert words in str(error.value)


def _philly(tmp_path, servers, end="2017-10-07 02:13:30") -> str:
    job = {
        "jobid": "application_1",
        "status": "Pass",
        "submitted_time": "2017-10-07 01:11:39",
        "attempts": [{"start_time": "2017-10-07 01:13:30", "end_time": end, "detail": servers}],
    }
    path = tmp_path / "cluster_job_log"
    path.write_text(json.dumps([job]))
    return str(path)


@pytest.mark.parametrize(
    ("servers", "field"),
    [
        ([{"ip": "m0", "gpus": 8}], "detail[0].gpus"),
        ([{"ip": "m0", "gpus": "gpu0,gpu1"}], "detail[0].gpus"),
        ([{"ip": "m0", "gpus": {"gpu0": 1}}], "detail[0].gpus"),
        (["m0"], "detail[0]"),
    ],
)
def test_a_philly_gpu_list_that_is_not_a_list_is_refused(tmp_path, servers, field):
    with pytest.raises(SpecError) as error:
        read_public_trace(_philly(tmp_path, servers), "philly")
    assert error.value.field == f"jobs[0] (id 'application_1').attempts[0].{field}"


def test_a_philly_log_with_gpu_lists_reads(tmp_path):
    servers = [{"ip": "m0", "gpus": ["gpu0", "gpu1"]}, {"ip": "m1", "gpus": ["gpu0"]}]
    (job,) = read_public_trace(_philly(tmp_path, servers), "philly")
    assert job.gpus == 3 and job.duration_s == 3600.0
    with pytest.raises(SpecError, match="expected a time like"):
        read_public_trace(_philly(tmp_path, servers, end="inf"), "philly")
