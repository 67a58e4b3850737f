"""``launch-args`` on result files from anywhere: a layout that cannot run is refused as
the step model refuses it, malformed files are clear errors, and the rank order that was
timed is written as the framework's argument or named in the notes."""

from __future__ import annotations

import json

import pytest

from fabricflow.cli import main
from fabricflow.errors import SpecError
from fabricflow.workload.launch_args import launch_arguments, result_arguments

LAYOUT = {
    "tp": 2,
    "pp": 2,
    "dp": 4,
    "cp": 1,
    "micro_batch": 1,
    "global_batch": 64,
    "seq_len": 8192,
}
STEP = {"model": "llama3-8b", "num_gpus": 16, "layout": LAYOUT, "order": "tp-cp-ep-dp-pp"}


def _run(tmp_path, capsys, text: str, *extra: str) -> tuple[int, dict]:
    path = tmp_path / "result.json"
    path.write_text(text)
    code = main(["launch-args", str(path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"dp": 16}, "layout", "differs from the GPU count 16"),
        ({"tp": 3, "dp": 2, "pp": 2}, "layout.tp", "num_attention_heads=32"),
        ({"tp": 0}, "layout.tp", "integer >= 1"),
        ({"tp": 2.5}, "layout.tp", "integer >= 1"),
        ({"zero": 5}, "layout.zero", "0, 1, 2 or 3"),
        ({"offload_optimizer": 2.0}, "layout.offload_optimizer", "[0, 1]"),
        ({"recompute": "fulll"}, "layout.recompute", "'full'"),
        ({"tp": "2"}, "layout.tp", "integer >= 1"),
        ({"tp": [2]}, "layout.tp", "integer >= 1"),
        ({"recompte": "full"}, "layout.recompte", "did you mean 'recompute'"),
    ],
)
def test_layouts_that_cannot_run_are_refused(tmp_path, capsys, change, field, words):
    result = {**STEP, "layout": {**LAYOUT, **change}}
    if change.get("tp") == 3:  # 3 x 2 x 2 = 12 GPUs
        result["num_gpus"] = 12
    code, out = _run(tmp_path, capsys, json.dumps(result))
    assert code == 2, out
    assert out["message"].startswith(f"{field}:") and words in out["message"], out


@pytest.mark.parametrize(
    "text",
    [
        '"a string"',
        "[1, 2]",
        '{"layout": "tp=2"}',
        '{"best": [1, 2]}',
        '{"layout": {"tp": NaN, "pp": 1}}',
        '{"layout": {"tp": 2, "tp": 4, "pp": 1}}',
        '{"layout": ' * 300 + "{}" + "}" * 300,
        '{"layout": ' + json.dumps({**LAYOUT, "tp": 2**70}) + "}",
        '{"layout": ' + json.dumps({**LAYOUT, "tp": 2**40, "pp": 2**30}) + "}",
    ],
)
def test_malformed_result_files_are_clear_errors(tmp_path, capsys, text):
    code, out = _run(tmp_path, capsys, text)
    assert code == 2 and out["error"] == "SpecError", out


def test_the_model_and_gpu_count_come_from_the_result_or_the_flag(tmp_path, capsys):
    # an optimize result has no model: heads are checked with --model, and said otherwise
    best = {"best": {**LAYOUT, "tp": 3, "dp": 1}}
    code, out = _run(tmp_path, capsys, json.dumps(best))
    assert code == 0 and any("heads" in note for note in out["notes"])
    code, out = _run(tmp_path, capsys, json.dumps(best), "--model", "llama3-8b")
    assert code == 2 and "num_attention_heads=32" in out["message"]
    # optimize --json names the model and the GPU count it searched for
    code, out = _run(tmp_path, capsys, json.dumps({**best, "model": "llama3-8b", "num_gpus": 6}))
    assert code == 2 and "num_attention_heads=32" in out["message"]


def _notes_and_args(layout, order, framework="megatron"):
    arguments, notes = launch_arguments(layout, framework, order=order)
    return arguments, notes


def test_the_rank_order_is_written_where_the_framework_can_build_it():
    # PP before DP: Megatron's --use-tp-pp-dp-mapping, NeMo's use_tp_pp_dp_mapping
    arguments, notes = _notes_and_args(LAYOUT, "tp-cp-ep-pp-dp")
    assert "--use-tp-pp-dp-mapping" in arguments and notes == []
    arguments, notes = _notes_and_args(LAYOUT, "tp-cp-ep-pp-dp", "nemo")
    assert "trainer.strategy.use_tp_pp_dp_mapping=True" in arguments and notes == []
    # the default order, and orders equal to it because the moved dimension has size 1
    for order in ("tp-cp-ep-dp-pp", "cp-tp-ep-dp-pp", "tp-ep-cp-dp-pp"):
        arguments, notes = _notes_and_args(LAYOUT, order)
        assert not any("mapping" in a for a in arguments) and notes == [], order


def test_a_rank_order_the_framework_cannot_build_is_named_in_the_notes():
    layout = {**LAYOUT, "cp": 2, "dp": 2, "seq_len": 8192}
    for framework in ("megatron", "nemo"):
        arguments, notes = _notes_and_args(layout, "cp-tp-ep-dp-pp", framework)
        assert not any("mapping" in a for a in arguments)
        (note,) = [n for n in notes if "rank order" in n]
        assert "cp-tp-ep-dp-pp" in note and "dense cp-tp-dp-pp" in note
        assert "tp-cp-ep-dp-pp or tp-cp-ep-pp-dp" in note


def test_a_step_result_carries_its_order_into_the_arguments(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, json.dumps({**STEP, "order": "tp-pp-cp-ep-dp"}))
    assert code == 0 and "--use-tp-pp-dp-mapping" in out["arguments"]
    assert out["order"] == "tp-pp-cp-ep-dp"
    code, out = _run(tmp_path, capsys, json.dumps({**STEP, "order": "tp-dp"}))
    assert code == 2 and out["message"].startswith("order:")


def test_the_automatic_expert_tensor_size_is_written_when_it_is_not_the_default():
    # ep 4 does not divide cp x dp = 2: the step model folds experts over TP (expert tp 1),
    # where both frameworks would default the expert TP size to tp = 2
    layout = {**LAYOUT, "tp": 2, "dp": 2, "pp": 1, "ep": 4, "global_batch": 8}
    arguments, _ = launch_arguments(layout, "megatron")
    assert "--expert-tensor-parallel-size 1" in arguments
    arguments, _ = launch_arguments({**layout, "ep": 2}, "megatron")
    assert not any(a.startswith("--expert-tensor") for a in arguments)


def test_the_api_refuses_what_the_cli_refuses():
    with pytest.raises(SpecError, match="differs from the GPU count"):
        result_arguments({**STEP, "num_gpus": 64})
    with pytest.raises(SpecError, match="^result: expected a JSON object, got list"):
        result_arguments([LAYOUT])


def test_topology_aware_placement_launches_the_order_it_picked():
    # a step result records the order the placement picked (here PP before DP)
    picked = {**STEP, "order": "tp-ep-pp-dp-cp", "placement": "topology-aware"}
    arguments, notes, launched = result_arguments(picked)
    assert "--use-tp-pp-dp-mapping" in arguments and launched["order"] == "tp-ep-pp-dp-cp"
    assert any("locality order" in note for note in notes)
    # without a model to rank the dimensions, the assumed ranking is said
    _, notes = launch_arguments(LAYOUT, "megatron", placement="topology-aware")
    assert any("TP > CP > EP > DP > PP was assumed" in note for note in notes)


def test_the_pp_before_dp_mapping_needs_equal_data_parallel_sizes():
    # with cp 2 the expert data-parallel size is cp x dp = 4, not dp = 2: Megatron-Core
    # refuses --use-tp-pp-dp-mapping with pp > 1, so the order is named, with the reason
    layout = {**LAYOUT, "cp": 2, "dp": 2}
    arguments, notes = launch_arguments(layout, "megatron", order="tp-cp-pp-ep-dp")
    assert "--use-tp-pp-dp-mapping" not in arguments
    (note,) = [n for n in notes if "rank order" in n]
    assert "expert data-parallel size (4) to equal dp (2)" in note


def test_an_optimize_winner_with_step_arguments_launches_with_notes():
    # optimize's best holds the other step_time arguments of the winner when they matter
    best = {
        **LAYOUT,
        "order": "tp-cp-ep-dp-pp",
        "placement": "scattered",
        "placement_seed": 3,
        "routing": "spray",
        "algorithms": {"dp": "tree"},
        "collectives": "analytic",
    }
    arguments, notes, launched = result_arguments({"best": best})
    assert launched["placement"] == "scattered" and "--micro-batch-size 1" in arguments
    assert any("routing 'spray'" in n for n in notes)
    assert any("{'dp': 'tree'}" in n and "NCCL_ALGO" in n for n in notes)


def test_a_folder_is_refused_with_what_to_give(tmp_path, capsys):
    """An 'optimize --out' folder holds no result object: the error says what to give
    (it used to say only that the folder is not a file)."""
    code = main(["launch-args", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    assert out["message"].startswith("result:") and "optimize --json" in out["message"], out


def test_an_error_object_is_named_as_one(tmp_path, capsys):
    """A step that failed with --json printed {"error", "message"}: saved and given to
    launch-args it was 'holds no layout'; now the error it holds is quoted."""
    text = json.dumps({"error": "SpecError", "message": "layout: needs 75.7 GiB per GPU"})
    code, out = _run(tmp_path, capsys, text)
    assert code == 2
    assert out["message"].startswith("result: is the error") and "75.7 GiB" in out["message"]
