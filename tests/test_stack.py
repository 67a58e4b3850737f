"""Software stacks: presets, overrides, the Layout defaults they set, and the CLI's --stack."""

import json

import pytest

import fabricflow as ff
from fabricflow.cli import main
from fabricflow.errors import SpecError
from fabricflow.workload.stack import LAYOUT_CHOICES, Stack


def test_presets_load_and_every_choice_is_a_layout_field():
    names = ff.list_stacks()
    assert {"megatron-2021", "megatron-2022", "megatron-core", "mcore-dsv3-gb200"} <= set(names)
    fields = set(ff.Layout.__dataclass_fields__)
    assert set(LAYOUT_CHOICES) <= fields
    for name in names:
        stack = ff.load_stack(name)
        assert stack.name == name
        # every preset's choices build a valid layout
        stack.layout_for(tp=1, pp=2, dp=4, global_batch=16).validate()


def test_overrides_replace_parameters_and_merge_choices():
    stack = ff.load_stack("mcore-dsv3-gb200", deepep_sms=20, layout={"cpu_binding": False})
    assert stack.deepep_sms == 20
    assert stack.choices["cpu_binding"] is False
    assert stack.choices["dispatcher"] == "hybridep"  # kept from the preset
    # a Stack passes through, with overrides
    assert ff.load_stack(stack, hybridep_sms=8).hybridep_sms == 8


def test_explicit_layout_fields_override_the_stack():
    stack = ff.load_stack("megatron-2022")
    layout = stack.layout_for(tp=8, dp=1, global_batch=8)
    assert (layout.sequence_parallel, layout.zero, layout.dp_overlap) == (False, 0, False)
    assert stack.layout_for(tp=8, dp=1, global_batch=8, zero=1).zero == 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"deepep_nvlink_dispatch": 1.5}, "stack.deepep_nvlink_dispatch"),
        ({"host_module_ops": -1.0}, "stack.host_module_ops"),
        ({"unbound_host_factor": 0.5}, "stack.unbound_host_factor"),
        ({"layout": {"tp": 8}}, "stack.layout.tp"),
        ({"no_such_field": 1.0}, "stack.no_such_field"),
    ],
)
def test_bad_stack_fields_are_named(kwargs, field):
    with pytest.raises(SpecError) as error:
        ff.load_stack("megatron-core", **kwargs)
    assert error.value.field == field


def test_unknown_preset_lists_the_presets():
    with pytest.raises(SpecError, match="megatron-2022"):
        ff.load_stack("megatron-2023")


def test_step_time_takes_a_stack_by_name_and_reports_it():
    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = ff.Layout(tp=1, dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096)
    kw = dict(stack="nemo-25.09", check_memory=False)
    result = ff.step_time("qwen3-30b-a3b", "h100-sxm", layout, fabric, **kw)
    assert result.details["stack"]["name"] == "nemo-25.09"
    assert result.details["stack"]["host_module_ops"] == pytest.approx(115 / 13.48, rel=0.01)
    # a slower host per module (a stack parameter) slows this host-bound MoE step
    slow = ff.load_stack("nemo-25.09", host_module_ops=20.0)
    slower = ff.step_time(
        "qwen3-30b-a3b", "h100-sxm", layout, fabric, stack=slow, check_memory=False
    )
    assert slower.step_time_s > result.step_time_s


def _step_json(capsys, *extra):
    args = [
        "step",
        "--fabric",
        "dgx-a100-superpod",
        "--gpu",
        "a100-80gb",
        "--model",
        "megatron-1.7b",
        "--gpus",
        "8",
        "--tp",
        "2",
        "--micro-batch",
        "1",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--json",
        *extra,
    ]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_stack_sets_defaults_flags_override_and_json_reports_it(capsys):
    out = _step_json(capsys, "--stack", "megatron-2022")
    assert out["stack"]["name"] == "megatron-2022"
    assert out["stack"]["layout"]["zero"] == 0
    assert out["layout"]["zero"] == 0 and out["layout"]["sequence_parallel"] is False
    assert out["layout"]["dp_overlap"] is False
    over = _step_json(capsys, "--stack", "megatron-2022", "--zero", "1", "--dp-overlap")
    assert over["layout"]["zero"] == 1 and over["layout"]["dp_overlap"] is True
    default = _step_json(capsys)
    assert default["stack"]["name"] == "megatron-core" and default["layout"]["zero"] == 1


def test_cli_stack_set_overrides_a_parameter_and_names_a_bad_one(capsys):
    out = _step_json(capsys, "--stack", "nemo-25.09", "--stack-set", "deepep_sms=20")
    assert out["stack"]["deepep_sms"] == 20.0 and out["stack"]["name"] == "nemo-25.09"
    args = ["step", "--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb"]
    args += ["--model", "megatron-1.7b", "--gpus", "8", "--micro-batch", "1"]
    args += ["--global-batch", "8", "--seq", "2048", "--stack-set", "hybridep_sms=-1"]
    assert main(args) == 2
    assert "--stack-set hybridep_sms" in capsys.readouterr().err


def test_cli_unknown_stack_exits_2(capsys):
    args = ["step", "--fabric", "dgx-a100-superpod", "--gpu", "a100-80gb"]
    args += ["--model", "megatron-1.7b", "--gpus", "8", "--micro-batch", "1"]
    args += ["--global-batch", "8", "--seq", "2048", "--stack", "megatron-1999"]
    assert main(args) == 2
    assert "--stack" in capsys.readouterr().err


def test_stack_is_frozen_and_hashable():
    stack = ff.load_stack("megatron-2022")
    assert isinstance(stack, Stack)
    assert hash(stack) == hash(ff.load_stack("megatron-2022"))
    with pytest.raises(AttributeError):
        stack.host_module_ops = 1.0  # type: ignore[misc]
