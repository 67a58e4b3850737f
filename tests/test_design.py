"""Fabric design search: design codes and specs by hand, the sweep-store search, the
Pareto front, and a ranking that doubling every price cannot move."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.design.search import design_fabric, mark_pareto, plot_design_front
from fabricflow.design.space import (
    DEFAULT_SPACE,
    design_code,
    design_codes,
    design_spec,
    parse_design,
)
from fabricflow.fabric.cost_table import default_table

# one layout only, so that a design costs one step-time evaluation
JOB = {
    "model": "llama3-8b",
    "gpus": 64,
    "global_batch": 64,
    "seq_len": 2048,
    "space": {"tp": [8], "pp": [1], "micro_batch": [1]},
}
SMALL = {
    "tiers": [2],
    "oversubscription": [1],
    "attachment": ["rail"],
    "planes": [1],
    "nic_speed": ["400Gbps"],
    "transport": ["ib", "roce"],
}


def test_codes_round_trip_and_cover_the_space():
    codes = design_codes()
    assert len(codes) == len(set(codes)) == 2 * 3 * 3 * 2 * 2 * 1 * 3
    for code in codes[:10]:
        assert design_code(parse_design(code)) == code
    assert "3t/7:1/rail-only/2p/800G/su8/roce" in codes
    with pytest.raises(ff.SpecError, match="unknown knob"):
        design_codes({"radix": [64]})
    with pytest.raises(ff.SpecError, match="space.transport"):
        design_codes({"transport": ["myrinet"]})
    assert set(DEFAULT_SPACE) == set(parse_design(codes[0]))


def test_design_spec_by_hand():
    """3 tiers of 64 x 400G InfiniBand, 7:1 at the spine: leaves 32/32, spines 56/8; a pod
    (top block) holds 32 x 56 = 1,792 GPUs, so 16,384 GPUs need 10 pods = 17,920 GPUs."""
    spec = design_spec("3t/7:1/rail/1p/400G/su8/ib", 16384)
    tiers = spec["topology"]["tiers"]
    assert [(t.get("down_ports"), t.get("up_ports")) for t in tiers] == [
        (32, 32),
        (56, 8),
        (64, None),
    ]
    assert spec["gpus"] == 17920
    # 10 pods under 64-port cores: spine uplinks in bundles of 4 (10 x 4 of 64 ports used)
    assert tiers[1]["uplink_bundle"] == 4
    assert spec["transport"] == {"protocol": "infiniband", "adaptive_routing": True}
    fabric = ff.build_fabric(spec)
    assert fabric.summary()["tiers"][1]["oversubscription"] == pytest.approx(7.0)
    # Ethernet 51.2T at 2 x 200G per GPU (2 planes): 256-port switches
    roce = design_spec("2t/1:1/rail-only/2p/400G/su8/roce", 16384)
    # per rail 2,048 GPUs = 16 leaves of 128: bundles of 16 fill the 256-port spines
    assert roce["topology"]["tiers"][0] == {
        "name": "leaf",
        "down_ports": 128,
        "up_ports": 128,
        "uplink_bundle": 16,
    }
    assert roce["gpus"] == 16384
    with pytest.raises(ff.SpecError, match="cannot hold 16,384"):
        design_spec("2t/1:1/rail/1p/400G/su8/ib", 16384)  # 2 tiers of 64 ports: 2,048


def test_mark_pareto():
    rows = [
        {"t": 1.0, "c": 3.0},
        {"t": 2.0, "c": 1.0},
        {"t": 2.0, "c": 2.0},  # dominated by the second
        {"t": 0.5, "c": 5.0},
    ]
    mark_pareto(rows, "t", "c")
    assert [r["pareto"] for r in rows] == [True, True, False, True]


def _doubled() -> dict:
    table = copy.deepcopy(default_table())
    for section in ("switches", "nics", "transceivers", "cables", "scale_up", "gpus"):
        for entry in table[section].values():
            entry["price"] *= 2
    table["power_price_per_kWh"] *= 2
    return table


@pytest.mark.slow  # three searches of two designs: ~10 s on a loaded 2-core machine
def test_design_search_store_front_and_price_scaling(tmp_path):
    search = design_fabric(
        {"gpu": "h100-sxm", "jobs": [JOB]},
        space=SMALL,
        store=tmp_path / "designs.zarr",
        workers=0,
        layout_budget_work=8,
    )
    assert [r["design"] for r in search.rows] == [
        search.best["design"],
        *[r["design"] for r in search.rows[1:]],
    ]
    assert len(search.rows) == 2 and not search.failed
    by_code = {r["design"]: r for r in search.rows}
    ib, roce = by_code["2t/1:1/rail/1p/400G/su8/ib"], by_code["2t/1:1/rail/1p/400G/su8/roce"]
    assert ib["network_capex"] != roce["network_capex"]
    # the best by tokens per dollar is the cheapest per token
    assert search.best["cost_per_million_tokens"] == min(
        r["cost_per_million_tokens"] for r in search.rows
    )
    # every design has the same GPUs: capex differs by the network only
    assert ib["capex"] - roce["capex"] == pytest.approx(ib["network_capex"] - roce["network_capex"])
    assert search.dataset["status"].values.tolist() == [1, 1]
    plot_design_front(search, tmp_path / "pareto.png")
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    # every price x 2: every cost x 2, the same ranking
    doubled = design_fabric(
        {"gpu": "h100-sxm", "jobs": [JOB]},
        space=SMALL,
        store=tmp_path / "doubled.zarr",
        workers=0,
        layout_budget_work=8,
        cost=_doubled(),
    )
    assert [r["design"] for r in doubled.rows] == [r["design"] for r in search.rows]
    for row, twice in zip(search.rows, doubled.rows, strict=True):
        assert twice["cost_per_million_tokens"] == pytest.approx(2 * row["cost_per_million_tokens"])
    # a budget below every design's capex leaves no winner
    poor = design_fabric(
        {"gpu": "h100-sxm", "jobs": [JOB]},
        space=SMALL,
        store=tmp_path / "designs.zarr",  # resumed: nothing is computed again
        workers=0,
        layout_budget_work=8,
        capex_budget=1.0,
    )
    assert poor.best is None and all(r["over_budget"] for r in poor.rows)


def test_bad_design_inputs_name_the_field(tmp_path):
    with pytest.raises(ff.SpecError, match="objective"):
        design_fabric([JOB], gpu="h100-sxm", store=tmp_path / "s", objective="speed")
    with pytest.raises(ff.SpecError, match="capex_budget"):
        design_fabric([JOB], gpu="h100-sxm", store=tmp_path / "s", capex_budget=-5)
    with pytest.raises(ff.SpecError, match=r"jobs\[0\].gpus"):
        design_fabric([{**JOB, "gpus": 0}], gpu="h100-sxm", store=tmp_path / "s")
    with pytest.raises(ff.SpecError, match="no design of the space"):
        design_fabric(
            [{**JOB, "gpus": 1_000_000}],
            gpu="h100-sxm",
            store=tmp_path / "s",
            space={"tiers": [2]},
        )


def test_rail_only_study_takes_the_fewest_tiers():
    from fabricflow.study.rail_only import FABRICS, fewest_tiers

    # rail-only: 1,024 GPUs per rail fit one 2-tier tree of 128-port switches
    assert len(fewest_tiers(FABRICS["rail-only"], 8192)["topology"]["tiers"]) == 2
    # rail-optimized 1:1 on 128 ports: 2 tiers hold 8,192 GPUs, 16,384 need 3
    assert len(fewest_tiers(FABRICS["rail-optimized"], 8192)["topology"]["tiers"]) == 2
    assert len(fewest_tiers(FABRICS["rail-optimized"], 16384)["topology"]["tiers"]) == 3


# a job whose layout search has work left after its first timed candidate
SEARCHED = {
    "model": "llama3-70b",
    "gpus": 256,
    "global_batch": 256,
    "seq_len": 2048,
    "space": {"tp": [1, 2, 4, 8], "pp": [1, 2], "micro_batch": [1, 2], "zero": [1, 3],
              "order": ["tp-cp-ep-dp-pp", "tp-dp-cp-ep-pp"]},
}  # fmt: skip
TWO = {**SMALL, "oversubscription": [1, 3], "transport": ["roce"]}


def _direct(code: str, candidate: dict, job: dict) -> float:
    """Step seconds of ``candidate`` on design ``code``, timed with ff.step_time."""
    from fabricflow.layout_search.layout_codes import SEARCHED_KNOBS

    fabric = ff.build_fabric(design_spec(code, job["gpus"]))
    fields = {k: v for k, v in candidate.items() if k in SEARCHED_KNOBS}
    order, placement = fields.pop("order"), fields.pop("placement")
    fields["dp"] = job["gpus"] // (fields["tp"] * fields["pp"] * fields["cp"])
    layout = ff.Layout(global_batch=job["global_batch"], seq_len=job["seq_len"], **fields)
    result = ff.step_time(
        job["model"], "h100-sxm", layout, fabric, order=order, placement=placement
    )
    return result.step_time_s


def test_designs_are_ranked_on_the_same_layouts_reproducibly(tmp_path, monkeypatch):
    """Searches cut short by a work budget: each design then takes the fastest of every
    design's best layouts (here with one more layout added to that set), timed on it; its
    step time is that layout's own step time on the design, the table names the layout and
    that the search stopped, and a second run (fresh stores) gives the same rows."""
    import fabricflow.design.search as study

    extra = {"tp": 8, "pp": 2, "micro_batch": 1, "zero": 1, "order": "tp-dp-cp-ep-pp"}
    real = study._common_layouts

    def with_extra(rows, jobs):
        common = real(rows, jobs)
        return [[*c, {**c[0], **extra}] for c in common]

    monkeypatch.setattr(study, "_common_layouts", with_extra)
    runs = [
        design_fabric(
            {"gpu": "h100-sxm", "jobs": [SEARCHED]},
            space=TWO,
            store=tmp_path / f"{i}.zarr",
            workers=0,
            layout_budget_work=1,
        )  # fmt: skip
        for i in range(2)
    ]
    first, second = runs
    assert first.common is not None and (tmp_path / "0-common.zarr").is_dir()
    assert [(r["design"], r["layout"], r["step_time_s"]) for r in first.rows] == [
        (r["design"], r["layout"], r["step_time_s"]) for r in second.rows
    ]
    assert {r["search"] for r in first.rows} == {"stopped"}
    union = with_extra(first.rows, [SEARCHED])[0]
    for row in first.rows:
        # the layout it shows is the one it was timed with...
        assert row["step_time_s"] == pytest.approx(
            _direct(row["design"], row["job0"], SEARCHED), rel=1e-9
        )
        # ...and no layout of the common set is faster on it
        for candidate in union:
            assert row["step_time_s"] <= _direct(row["design"], candidate, SEARCHED) * (1 + 1e-9)
        assert row["layout"].startswith(f"TP{row['job0']['tp']} ")
        assert row["gpus"] == 256 and row["fabric_gpus"] >= 256
        # network capex per GPU of the workload, not of the GPUs built
        assert row["network_capex_per_gpu"] == pytest.approx(row["network_capex"] / 256)


def test_design_cli_table_shows_layout_search_and_reasons(tmp_path, capsys):
    from fabricflow.cli import main

    code = main(
        [
            "design", "--gpu", "h100-sxm", "--job", "llama3-8b:64:64:2048", "--fix", "tp=8",
            "--fix", "pp=1", "--fix", "micro_batch=1", "--space", "tiers=1,2",
            "--space", "oversubscription=1", "--space", "attachment=rail",
            "--space", "planes=1", "--space", "nic_speed=400Gbps", "--space", "transport=ib",
            "--layout-budget-work", "4", "--out", str(tmp_path / "out"), "--workers", "0",
        ]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "layout (first job)" in text and "GPUs built" in text and "search" in text
    assert "TP8 CP1 PP1 DP8" in text and "finished" in text
    # the 1-tier rail design is infeasible, and the reason is printed
    assert "infeasible 1t/1:1/rail/1p/400G/su8/ib: " in text and "rails cannot meet" in text
    assert "designs to evaluate" in captured.err  # progress on stderr
    import csv

    with open(tmp_path / "out" / "designs.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["layout"].startswith("TP8 CP1 PP1 DP8") and rows[0]["search"] == "finished"
    assert float(rows[0]["fabric_gpus"]) >= float(rows[0]["gpus"]) == 64
    # each design's fabric as a YAML spec that loads back to the fabric it was timed on
    import fabricflow as ff
    from fabricflow.design.space import design_spec
    from fabricflow.fabric.spec import build_fabric

    saved = tmp_path / "out" / "fabrics" / "2t_1-1_rail_1p_400G_su8_ib.yaml"
    loaded = ff.load_fabric(str(saved))
    built = build_fabric(design_spec("2t/1:1/rail/1p/400G/su8/ib", 64))
    assert loaded.num_gpus == built.num_gpus == float(rows[0]["fabric_gpus"])
    assert np.array_equal(loaded.capacity, built.capacity)
    assert np.array_equal(loaded.link_src, built.link_src)


def test_design_cli_default_work_matches_the_api():
    from fabricflow.cli import build_parser
    from fabricflow.design.space import DEFAULT_LAYOUT_BUDGET_WORK

    parser = build_parser("design")
    args = parser.parse_args(
        ["design", "--gpu", "h100-sxm", "--job", "llama3-8b:64:64:2048", "--out", "x"]
    )
    assert args.layout_budget_work == DEFAULT_LAYOUT_BUDGET_WORK


def test_pareto_legend_lists_only_classes_with_points_and_names_the_currency(tmp_path):
    from fabricflow.design.search import DesignSearch

    rows = [
        {"design": "2t/1:1/rail/1p/400G/su8/ib", "step_time_s": 1.0,
         "cost_per_million_tokens": 2.0, "over_budget": False},
        {"design": "2t/3:1/rail/1p/400G/su8/ib", "step_time_s": 1.5,
         "cost_per_million_tokens": 1.0, "over_budget": False},
        {"design": "2t/1:1/rail-only/1p/400G/su8/ib", "step_time_s": 1.0,
         "cost_per_million_tokens": 2.0, "over_budget": False},
    ]  # fmt: skip
    mark_pareto(rows, "step_time_s", "cost_per_million_tokens")
    search = DesignSearch(rows, rows[0], {}, {}, None, "step_time", None, None, "USD")
    import matplotlib

    matplotlib.use("Agg")
    from unittest import mock

    with mock.patch("fabricflow.design.search.save_figure") as save:
        plot_design_front(search, tmp_path / "p.png")
    fig = save.call_args[0][0]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "rail" in labels and "rail-only" in labels and "tor" not in labels
    assert "USD" in ax.get_ylabel()
    # two designs at one point share a label instead of printing over each other
    texts = [t.get_text() for t in ax.texts]
    assert "2t/1:1/rail/1p/400G/su8/ib\n2t/1:1/rail-only/1p/400G/su8/ib" in texts
    assert len(texts) == 2


def test_layout_code_round_trips_through_floats():
    """A design's layout crosses the float sweep store: every coded knob comes back with
    its type, text knobs through the job's space list or the knob's vocabulary."""
    from fabricflow.layout_search.layout_codes import candidate_of, coded_knobs, decode, encode

    job = {**JOB, "space": {"tp": [8], "routing": ["ecmp", "spray"]}, "fixed": {"pp": 2}}
    layout = ff.Layout(tp=8, pp=2, dp=4, vpp=2, micro_batch=2, recompute="selective", zero=3,
                       sequence_parallel=True, dp_overlap=False)  # fmt: skip
    kwargs = {"layout": layout, "order": "cp-tp-ep-dp-pp", "placement": "topology-aware",
              "routing": "spray"}  # fmt: skip
    coded = encode(candidate_of(kwargs), job, "job0_")
    assert all(isinstance(v, float) for v in coded.values())
    assert "job0_pp" not in coded and "job0_routing" in coded  # pinned: not coded
    back = decode(coded, job, "job0_")
    for knob in coded_knobs(job):
        assert back[knob] == candidate_of(kwargs)[knob] and type(back[knob]) is type(
            candidate_of(kwargs)[knob]
        )
    assert back["pp"] == 2  # filled in from the job's pin
