"""Layout validation: every invalid layout gets an error naming the field."""

import pytest

from fabricflow.errors import SpecError
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model

LLAMA = load_model("llama3-70b")  # 64 heads, 8 KV heads, 80 layers
MIXTRAL = load_model("mixtral-8x7b")  # 8 experts


def test_valid_layout_passes_and_counts():
    layout = Layout(
        tp=8,
        pp=4,
        dp=16,
        cp=2,
        vpp=5,
        micro_batch=1,
        global_batch=512,
        seq_len=8192,
        sequence_parallel=True,
    ).validate(LLAMA, 1024)
    assert layout.num_gpus == 1024 and layout.num_micro_batches == 32
    assert layout.schedule == "interleaved" and layout.expert_dp == 32


@pytest.mark.parametrize(
    "kwargs, num_gpus, model, match",
    [
        (dict(tp=8, pp=2, dp=4), 128, LLAMA, "differs from the GPU count 128"),
        (dict(tp=3, dp=1), None, LLAMA, "num_attention_heads"),
        (dict(tp=16, dp=1), None, LLAMA, "num_key_value_heads"),
        # layer counts that pp x vpp does not divide are split unevenly now (as Megatron's
        # uneven pipeline splits); only too few layers for the stages are refused
        (dict(pp=128, dp=1), None, LLAMA, "cannot fill"),
        (dict(pp=4, dp=1, pp_split=(20, 20, 20, 19)), None, LLAMA, "sums to 79"),
        (dict(dp=4, ep=3, global_batch=12), None, MIXTRAL, "ep x expert_tp = 3 x 1 must divide"),
        (
            dict(tp=2, dp=2, ep=4, expert_tp=2, global_batch=4),
            None,
            MIXTRAL,
            "ep x expert_tp = 4 x 2",
        ),
        (dict(dp=6, ep=6, global_batch=12), None, MIXTRAL, "must divide the 8 experts"),
        (dict(dp=4, ep=2, global_batch=8), None, LLAMA, "has no experts"),
        (dict(dp=4, micro_batch=3, global_batch=16), None, LLAMA, "global_batch"),
        (dict(dp=1, cuda_graph_scope="attn,moe_preprocess"), None, LLAMA, "needs moe_router"),
        (dict(dp=1, cuda_graph_scope="everything"), None, LLAMA, "unknown scope"),
        (dict(dp=1, recompute="some"), None, LLAMA, "recompute"),
        (dict(dp=1, precision="fp4"), None, LLAMA, "precision"),
        (dict(dp=1, zero=4), None, LLAMA, "zero"),
        (dict(dp=0), None, LLAMA, "layout.dp"),
        (dict(dp=1, cp=3, seq_len=4096), None, LLAMA, "seq_len"),
    ],
)
def test_invalid_layouts_raise_clear_errors(kwargs, num_gpus, model, match):
    with pytest.raises(SpecError, match=match):
        Layout(**kwargs).validate(model, num_gpus)


def test_llama3_405b_split_counts_embedding_and_loss_as_layers():
    model = load_model("llama3-405b")  # 126 layers on 16 stages: 7 + 14 x 8 + 7 (Llama 3 paper)
    layout = Layout(tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048, seq_len=8192)
    layout.validate(model, 16384)
    first, middle, last = layout.stage_layers(model)
    assert (first, middle, last) == (7, 8, 7)
    assert first + 14 * middle + last == model.num_layers


def test_even_split():
    assert Layout(pp=4, dp=1).stage_layers(LLAMA) == (20, 20, 20)


def test_parallel_label_names_each_degree():
    from fabricflow.workload.layout import Layout

    assert Layout(tp=8, pp=4, vpp=2, ep=8, dp=4).parallel_label() == "TP8 CP1 EP8 PP4x2 DP4"
    assert Layout(tp=2, cp=2, dp=4).parallel_label() == "TP2 CP2 PP1 DP4"


@pytest.mark.parametrize(
    "kwargs, model, field, words",
    [
        # knobs that act only beside another setting are refused alone, not ignored
        (dict(pp=2, microbatch_group=2, global_batch=8), LLAMA, "microbatch_group", "vpp >= 2"),
        (dict(recompute_layers=4), LLAMA, "recompute_layers", "recompute='full'"),
        (dict(recompute_layers=4, recompute="selective"), LLAMA, "recompute_layers", "'full'"),
        (dict(recompute_modules="mlp"), LLAMA, "recompute_modules", "recompute='selective'"),
        (dict(recompute="full", recompute_modules="mlp"), LLAMA, "recompute_modules", "whole"),
        # MoE knobs on a dense model
        (dict(expert_tp=1), LLAMA, "expert_tp", "has no experts"),
        (dict(ep_overlap=True), LLAMA, "ep_overlap", "has no experts"),
        (dict(moe_capacity_factor=1.25), LLAMA, "moe_capacity_factor", "has no experts"),
    ],
)
def test_knobs_without_the_setting_they_act_on_are_refused(kwargs, model, field, words):
    with pytest.raises(SpecError) as info:
        Layout(**kwargs).validate(model)
    assert info.value.field == f"layout.{field}" and words in str(info.value)


def test_the_same_knobs_beside_their_setting_are_accepted():
    Layout(pp=2, vpp=2, microbatch_group=2, global_batch=8).validate(LLAMA)
    Layout(recompute="full", recompute_layers=4).validate(LLAMA)
    Layout(recompute="selective", recompute_modules="mlp").validate(LLAMA)
    Layout(dp=8, ep=8, expert_tp=1, ep_overlap=True, moe_capacity_factor=1.25,
           global_batch=8).validate(MIXTRAL)  # fmt: skip


def test_step_and_optimize_refuse_a_knob_without_its_setting(capsys):
    """One rule set: the step command and the layout search both refuse it."""
    import json

    from fabricflow.cli import main

    common = ["--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb", "--model", "llama3-8b",
              "--gpus", "8", "--global-batch", "8", "--seq", "2048", "--json"]  # fmt: skip
    code = main(["step", *common, "--tp", "8", "--micro-batch", "1", "--ep-overlap"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["message"].startswith("layout.ep_overlap:")
    code = main(["optimize", *common, "--fix", "recompute_layers=2", "--fix", "recompute=none"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "recompute_layers" in out["message"], out


def test_integers_beyond_int64_are_refused_by_the_api_and_the_cli(capsys):
    """The rules run on int64 columns: a larger Python int overflowed inside numpy."""
    import json

    from fabricflow.cli import main

    with pytest.raises(SpecError, match=r"layout.dp: 1180591620717411303424 is too large"):
        Layout(dp=2**70).validate(LLAMA)
    code = main(["step", "--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb", "--model",
                 "llama3-8b", "--gpus", str(2**70), "--tp", "8", "--micro-batch", "1",
                 "--global-batch", "8", "--seq", "2048", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "--gpus: 1180591620717411303424 is too large" in out["message"]


@pytest.mark.parametrize(
    ("kwargs", "field", "match"),
    [
        # 8 x (2^63 - 1) wrapped to -8, which divides 512: the layout passed and the step
        # failed later on a negative message size ('size: ... got -33554432.0')
        ({"dp": 8, "micro_batch": 2**63 - 1}, "layout.global_batch", "smaller than dp x"),
        ({"dp": 8, "micro_batch": 128}, "layout.global_batch", "smaller than dp x"),
        ({"global_batch": 2**62, "seq_len": 4096}, "layout.seq_len", "tokens per step"),
        ({"tp": 2**61, "dp": 8}, "layout", "GPUs"),
    ],
)
def test_sizes_whose_products_overflow_int64_are_refused(kwargs, field, match):
    with pytest.raises(SpecError, match=match) as error:
        Layout(**{"global_batch": 512, **kwargs}).validate()
    assert error.value.field == field
