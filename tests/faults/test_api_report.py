"""Inputs to the report (``build_report``): fabrics named like models and GPUs, defaults
that fit the topology."""

from __future__ import annotations

import pytest

import fabricflow as ff
from fabricflow.errors import SpecError


def test_report_default_fail_kind_on_a_torus_is_its_ici_cables():
    # `fabricflow report --fabric tpu-v4-pod ...` with default flags exited 2: "no
    # switch-to-switch cables to fail", though the torus reroutes around a failed ICI cable.
    from fabricflow.report.build import default_fail_kind

    assert default_fail_kind(ff.load_fabric("tpu-v4-pod")) == "ici"
    assert default_fail_kind(ff.load_fabric("fat-tree-k16")) == "leaf"


def test_build_report_takes_a_fabric_name_like_model_and_gpu():
    # build_report("fat-tree-k16", "llama3-8b", ...) was an AttributeError ('str' object
    # has no attribute 'num_gpus') although model and gpu take preset names.
    from fabricflow.report.build import build_report

    with pytest.raises(SpecError, match="^gpus: 4,096 GPUs do not fit 'fat-tree-k16'"):
        build_report("fat-tree-k16", "llama3-8b", "h100-sxm", 4096, budget_s=0)
    with pytest.raises(SpecError, match="^fabric: expected a Fabric"):
        build_report(1024, "llama3-8b", "h100-sxm", 16, budget_s=0)
