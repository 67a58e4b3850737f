"""``fabricflow launch-args``: a step/optimize layout as Megatron-LM and NeMo arguments."""

from __future__ import annotations

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.workload.launch_args import launch_arguments, layout_of

LAYOUT = {
    "tp": 4,
    "pp": 8,
    "dp": 16,
    "cp": 2,
    "ep": 1,
    "vpp": 3,
    "sequence_parallel": True,
    "micro_batch": 1,
    "global_batch": 1024,
    "seq_len": 8192,
    "recompute": "full",
    "precision": "bf16",
    "zero": 1,
    "dp_overlap": True,
    "tp_overlap": True,
    "grad_reduce_dtype": "fp32",
    "offload_optimizer": 0.5,
    "pp_split": [3, 4, 4, 4, 4, 4, 4, 5],
}


def test_megatron_arguments_of_a_layout():
    arguments, notes = launch_arguments(LAYOUT, "megatron")
    for expected in (
        "--tensor-model-parallel-size 4",
        "--pipeline-model-parallel-size 8",
        "--context-parallel-size 2",
        "--num-virtual-stages-per-pipeline-rank 3",
        "--sequence-parallel",
        "--micro-batch-size 1",
        "--global-batch-size 1024",
        "--seq-length 8192",
        "--recompute-granularity full",
        "--bf16",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--tp-comm-overlap",
        "--accumulate-allreduce-grads-in-fp32",
        "--optimizer-cpu-offload",
        "--optimizer-offload-fraction 0.5",
    ):
        assert expected in arguments, expected
    assert any(
        "pipeline split [3, 4, 4, 4, 4, 4, 4, 5]" in note for note in notes
    )  # said, not dropped
    plain = {**LAYOUT, "recompute": "none", "zero": 0, "tp": 1, "vpp": 1, "offload_optimizer": 0}
    arguments, _ = launch_arguments(plain, "megatron")
    assert not any(
        a.startswith(("--recompute", "--use-distributed", "--tp-comm", "--num-virt"))
        for a in arguments
    )


def test_nemo_overrides_of_a_layout():
    arguments, _ = launch_arguments(LAYOUT, "nemo")
    for expected in (
        "trainer.strategy.tensor_model_parallel_size=4",
        "trainer.strategy.pipeline_model_parallel_size=8",
        "trainer.strategy.virtual_pipeline_model_parallel_size=3",
        "trainer.strategy.sequence_parallel=True",
        "data.global_batch_size=1024",
        "data.seq_length=8192",
        "model.config.recompute_granularity=full",
    ):
        assert expected in arguments, expected


def test_layouts_of_step_and_optimize_results_and_bad_input():
    assert layout_of({"layout": LAYOUT, "step_time_s": 1.0}) is LAYOUT
    assert layout_of({"best": LAYOUT}) is LAYOUT
    for bad in ({"step_time_s": 1.0}, [1, 2]):
        with pytest.raises(ff.SpecError) as error:
            layout_of(bad)
        assert error.value.field == "result"
    with pytest.raises(ff.SpecError) as error:
        launch_arguments(LAYOUT, "deepspeed")
    assert error.value.field == "framework"
    with pytest.raises(ff.SpecError, match="lacks 'seq_len'"):
        launch_arguments(
            {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 8}, "megatron"
        )


def test_cli_reads_a_result_file(tmp_path, capsys):
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"best": LAYOUT, "step_time_s": 2.0}))
    assert main(["launch-args", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["argv"][:2] == ["--tensor-model-parallel-size", "4"]
    assert main(["launch-args", str(path), "--framework", "nemo"]) == 0
    assert "trainer.strategy.tensor_model_parallel_size=4" in capsys.readouterr().out
    path.write_text("{not json")
    assert main(["launch-args", str(path), "--json"]) == 2
    assert "is not valid JSON: " in json.loads(capsys.readouterr().out)["message"]
