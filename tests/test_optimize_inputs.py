"""Bad input to the layout search: every refusal names its field (Python API and CLI)."""

from __future__ import annotations

import pytest
from optimize_cases import GPU, SEQ, small_model, tiny_oversubscribed

from fabricflow.errors import SpecError
from fabricflow.layout_search.knobs import parse_assignments
from fabricflow.layout_search.optimize import optimize_layout

SMALL = {"tp": [1, 2], "pp": [1]}


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"fixed": ["tp", 8]}, "fixed", ["dict"]),
        ({"fixed": "tp=8"}, "fixed", ["dict"]),
        ({"space": {}}, "space", ["empty", "None"]),
        ({"space": {"tp": 4}}, "space.tp", ["list", "[4]"]),
        ({"space": {"order": "tp-cp-ep-dp-pp"}}, "space.order", ["list"]),
        ({"space": {"tp": []}}, "space.tp", ["empty"]),
        ({"space": SMALL, "progress": "loud"}, "progress", ["function"]),
        ({"space": SMALL, "budget_s": float("nan")}, "budget_s", ["> 0"]),
        ({"space": SMALL, "budget_s": float("inf")}, "budget_s", ["finite"]),
    ],
)
def test_bad_arguments_are_spec_errors_naming_the_field(kwargs, field, words):
    with pytest.raises(SpecError) as info:
        optimize_layout(
            small_model(), GPU, tiny_oversubscribed(), gpus=8, global_batch=16, seq_len=SEQ,
            **kwargs,
        )  # fmt: skip
    assert info.value.field == field
    for word in words:
        assert word in str(info.value)


def test_a_knob_given_twice_is_refused():
    with pytest.raises(SpecError) as info:
        parse_assignments(["tp=2", "tp=4"], many=False, field="--fix")
    assert info.value.field == "--fix tp" and "2" in str(info.value) and "4" in str(info.value)
    # the same pin twice contradicts nothing
    assert parse_assignments(["tp=2", "tp=2"], many=False, field="--fix") == {"tp": 2}
    with pytest.raises(SpecError) as info:
        parse_assignments(["tp=2,4", "tp=8"], many=True, field="--space")
    assert info.value.field == "--space tp" and "tp=2,4,8" in str(info.value)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--fix", "tp=2", "--fix", "tp=4"], ["--fix tp", "given twice"]),
        (["--space", "tp=1,2", "--space", "tp=4"], ["--space tp", "given twice"]),
    ],
)
def test_cli_refuses_a_knob_given_twice(flags, words, capsys):
    from fabricflow.cli import main

    code = main(
        [
            "optimize", "--fabric", "dgx-a100-superpod", "--gpu", GPU, "--model",
            "megatron-1.7b", "--gpus", "16", "--global-batch", "32", "--seq", "2048", *flags,
        ]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err
