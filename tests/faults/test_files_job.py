"""A ``--job`` file (GPU types in pipeline order) with a misspelled key is refused with the
closest name; a missing ``count`` names the entry."""

from __future__ import annotations

import pytest

from fabricflow.errors import SpecError
from fabricflow.workload.hetero import load_job


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("gpu: [{gpu: h100-sxm, count: 8}]\n", "job", "did you mean 'gpus'"),
        ("gpus: [{gpu: h100-sxm, cuont: 8}]\n", "job.gpus[0]", "did you mean 'count'"),
        ("gpus: [{gpu: h100-sxm}]\n", "job.gpus[0].count", "is required"),
        ("gpus: [h100-sxm]\n", "job.gpus[0]", "expected {gpu: NAME, count: N}"),
    ],
)
def test_bad_job_files_name_the_field(tmp_path, text, field, words):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_job(str(path))
    assert error.value.field == field and words in str(error.value), str(error.value)
