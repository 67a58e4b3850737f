"""The table interface of the compute and memory models: one implementation for tables and
for single layouts (compute_table == compute_only, memory_table == memory_per_gpu,
table_problems == Layout.validate), vectorized over rows."""

import dataclasses

import numpy as np
import pytest

from fabricflow.errors import SpecError
from fabricflow.workload.compute import collective_sizes, compute_table
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.gpu_memory import memory_headroom, memory_per_gpu, memory_table, usable_hbm
from fabricflow.workload.layout import Layout, layout_table, table_problems
from fabricflow.workload.model_spec import load_model
from fabricflow.workload.step import compute_only

H100 = load_gpu("h100-sxm")
LLAMA = load_model("llama3-8b")  # 32 layers, 32 heads, 8 KV heads
MIXTRAL = load_model("mixtral-8x7b")


def _layouts(rng, count):
    """Random layouts over the knobs the optimizer searches (some invalid on purpose)."""
    out = []
    for _ in range(count):
        tp = int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 2, 4, 6]))
        vpp = int(rng.choice([1, 2])) if pp > 1 else 1
        dp = int(rng.choice([1, 2, 4]))
        micro = int(rng.choice([1, 2]))
        schedule = "dualpipe" if pp % 2 == 0 and rng.random() < 0.2 and vpp == 1 else "auto"
        out.append(
            Layout(
                tp=tp,
                pp=pp,
                vpp=vpp,
                dp=dp,
                micro_batch=micro,
                global_batch=dp * micro * int(rng.choice([4, 8, 12, 16])),
                seq_len=int(rng.choice([2048, 4096])),
                sequence_parallel=bool(rng.random() < 0.5),
                recompute=str(rng.choice(["none", "selective", "full"])),
                precision=str(rng.choice(["bf16", "fp8"])),
                zero=int(rng.choice([0, 1, 2, 3])),
                dp_overlap=bool(rng.random() < 0.5),
                pipeline_schedule=schedule,
                offload_optimizer=float(rng.choice([0.0, 0.0, 0.5])),
            )
        )
    return out


def test_compute_table_is_compute_only_row_by_row():
    rng = np.random.default_rng(1)
    layouts = [lay for lay in _layouts(rng, 60) if _valid(lay, LLAMA)]
    assert len(layouts) > 20
    parts = compute_table(LLAMA, H100, layout_table(layouts))
    for i, layout in enumerate(layouts):
        alone = compute_only(LLAMA, H100, layout)
        assert parts.compute_s[i] == pytest.approx(alone["compute"], rel=1e-12)
        assert parts.bubble_s[i] == pytest.approx(alone["bubble"], rel=1e-12, abs=1e-15)
        assert parts.optimizer_s[i] == pytest.approx(alone["optimizer"], rel=1e-12)
        assert parts.offload_s[i] == pytest.approx(alone["offload"], rel=1e-12, abs=1e-15)
        assert parts.bound_s[i] == pytest.approx(sum(alone.values()), rel=1e-12)


def test_memory_table_is_memory_per_gpu_row_by_row():
    rng = np.random.default_rng(2)
    layouts = [lay for lay in _layouts(rng, 60) if _valid(lay, LLAMA)]
    table = memory_table(LLAMA, layout_table(layouts))
    for i, layout in enumerate(layouts):
        one = memory_per_gpu(LLAMA, layout)
        assert table.total[i] == pytest.approx(one.total, rel=1e-12)
        assert table.activations[i] == pytest.approx(one.activations, rel=1e-12)
        assert table.offloaded[i] == pytest.approx(one.offloaded, rel=1e-12, abs=1e-6)


def _valid(layout, model) -> bool:
    try:
        layout.validate(model)
    except SpecError:
        return False
    return True


def test_table_problems_agree_with_validate():
    rng = np.random.default_rng(3)
    layouts = _layouts(rng, 80) + [
        Layout(tp=3),
        Layout(dp=4, ep=3, global_batch=12),
        Layout(pp=4, pp_split=(8, 8, 8, 7)),
        Layout(vpp=2, pp=1),
        Layout(recompute="selective", recompute_modules="core_attn,nope"),
        Layout(moe_capacity_factor=0.5),
    ]
    ok, field, message = table_problems(layout_table(layouts), LLAMA)
    for i, layout in enumerate(layouts):
        try:
            layout.validate(LLAMA)
        except SpecError as error:
            assert not ok[i] and field[i] == error.field and message[i] in str(error)
        else:
            assert ok[i] and field[i] is None


def test_columns_build_a_table_and_broadcast_scalars():
    table = layout_table(tp=np.array([1, 2, 4, 8]), dp=np.array([8, 4, 2, 1]), seq_len=4096)
    assert len(table) == 4 and list(table.seq_len) == [4096] * 4
    assert Layout.from_table(table, 2) == Layout(tp=4, dp=2, seq_len=4096)
    with pytest.raises(SpecError, match="layout.tp"):
        layout_table(tp=np.array([1.5, 2.0]))
    with pytest.raises(SpecError, match="layout.sequence_parallel"):
        layout_table(sequence_parallel=np.array([1, 0]))
    with pytest.raises(SpecError, match="layout.nonsense"):
        layout_table(nonsense=[1])


def test_moe_rows_fold_experts_and_size_collectives():
    layouts = [
        Layout(tp=2, dp=8, ep=8, micro_batch=1, global_batch=16, seq_len=4096),
        Layout(tp=2, dp=4, ep=8, micro_batch=1, global_batch=16, seq_len=4096),
    ]
    table = layout_table(layouts)
    # ep=8 divides dp x cp = 8: Megatron's default expert_tp = tp; else experts fold over TP
    assert list(table.expert_tensor) == [2, 1]
    assert [layout.expert_tensor for layout in layouts] == [2, 1]
    ok, _, _ = table_problems(table, MIXTRAL)
    assert ok.all()
    sizes = collective_sizes(MIXTRAL, table)
    tokens = 4096 / 2  # per TP rank under SP-style sharding of the dispatch
    assert sizes["ep_combine"][0] == pytest.approx(2.0 * tokens * 2 * 4096 * 1.1)
    mem = memory_table(MIXTRAL, table)
    assert mem.total[1] > mem.total[0]  # unsplit experts weigh more


def test_hetero_gpus_per_rank():
    h20 = load_gpu("h20")
    layout = Layout(tp=8, pp=4, dp=1, micro_batch=1, global_batch=8, pp_split=(8, 8, 8, 8))
    rank_gpus = (H100, H100, h20, h20)
    table = compute_table(LLAMA, rank_gpus, layout_table([layout]))
    alone = compute_only(LLAMA, [(H100, 16), (h20, 16)], layout)
    assert table.bound_s[0] == pytest.approx(sum(alone.values()), rel=1e-12)
    assert table.bound_s[0] > compute_table(LLAMA, H100, layout_table([layout])).bound_s[0]


def test_headroom_is_a_fixed_part_and_a_fraction():
    assert memory_headroom(H100) == pytest.approx(2 * 2**30 + 0.03 * H100.hbm)
    assert usable_hbm(H100) == pytest.approx(H100.hbm - memory_headroom(H100))


def test_large_tables_evaluate_without_a_loop_over_rows():
    n = 20_000
    rng = np.random.default_rng(4)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4], n)
    table = layout_table(
        tp=tp,
        pp=pp,
        dp=np.full(n, 1),
        micro_batch=rng.choice([1, 2], n),
        global_batch=np.full(n, 64),
        seq_len=np.full(n, 4096),
        recompute=rng.choice(["none", "full"], n),
    )
    ok, _, _ = table_problems(table, LLAMA)
    parts = compute_table(LLAMA, H100, table.take(ok))
    mem = memory_table(LLAMA, table.take(ok))
    assert np.isfinite(parts.bound_s).all() and (mem.total > 0).all()
    # rows that differ only in a knob that neither compute nor memory reads agree exactly
    first = int(np.flatnonzero(ok)[0])
    same = dataclasses.replace(Layout.from_table(table, first), dp_overlap=False)
    assert compute_only(LLAMA, H100, same)["compute"] == pytest.approx(parts.compute_s[0])


def test_for_layout_is_the_table_function_on_one_row():
    """One way to ask the table models about a single layout: for_layout runs the table
    function on the layout's one-row table and returns that row, whatever its shape."""
    from fabricflow.workload.compute import CommTimes, compose
    from fabricflow.workload.gpu_memory import layer_activation_table, rank_memory_arrays
    from fabricflow.workload.layer_cost import head_cost_table, layer_cost_table
    from fabricflow.workload.layout import for_layout
    from fabricflow.workload.layout_table import only_row
    from fabricflow.workload.stages import stage_groups

    layouts = _layouts(np.random.default_rng(7), 40)
    ok = table_problems(layout_table(layouts), LLAMA)[0]
    layout = [lay for lay, good in zip(layouts, ok, strict=True) if good][0]
    table = layout_table([layout])
    # arrays [1] -> a scalar; a tuple -> each item's row; a dataclass -> its row(0)
    saved = for_layout(layer_activation_table, layout, model=LLAMA, moe=False)
    assert saved == layer_activation_table(LLAMA, table, moe=False)[0]
    fwd, bwd = for_layout(head_cost_table, layout, model=LLAMA, gpu=H100)
    assert (fwd, bwd) == tuple(x[0] for x in head_cost_table(LLAMA, H100, table))
    cost = for_layout(layer_cost_table, layout, model=LLAMA, gpu=H100, moe=False)
    assert cost == layer_cost_table(LLAMA, H100, table, moe=False).row(0)
    # a dict of arrays [1, P] -> arrays [P]
    group = stage_groups(LLAMA, table)[0]
    ranks = for_layout(
        lambda table: rank_memory_arrays(LLAMA, table, stage_groups(LLAMA, table)[0]), layout
    )
    for key, value in rank_memory_arrays(LLAMA, table, group).items():
        assert np.array_equal(ranks[key], value[0]) and ranks[key].shape == (layout.pp,)
    # Composition.row: floats, the slowest rank's index as an int
    parts = for_layout(compose, layout, model=LLAMA, gpu=H100, comm=CommTimes.free())
    whole = compose(LLAMA, H100, table, CommTimes.free())
    assert parts.breakdown == {key: float(v[0]) for key, v in whole.breakdown.items()}
    assert isinstance(parts.slow["rank"], int)
    with pytest.raises(TypeError, match="has rows"):
        only_row(3.0)
