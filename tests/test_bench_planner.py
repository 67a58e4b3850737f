"""The ``planner`` bench section: the step model on both max-min backends agrees."""

from __future__ import annotations

import argparse

import pytest


@pytest.mark.slow
def test_planner_section_quick():
    from fabricflow.bench import planner

    result = planner.run(argparse.Namespace(quick=True, gpu=False))
    assert result["backends_agree"]
    assert result["numpy"]["cold_cpu_s"] > 0 and result["jax"]["warm_cpu_s"] >= 0
    assert result["batch_layouts"]["fastest"] in ("jax_block", "jax_vmap", "numpy")
