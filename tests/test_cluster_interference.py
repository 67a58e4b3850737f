"""Interference of co-located jobs (fabricflow.cluster.interference): exact alone, slowed
when sharing oversubscribed uplinks, untouched on disjoint links, and the joint solve
against a brute-force union solve."""

from __future__ import annotations

import types
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.cluster.interference import (
    Interference,
    job_traffic_shape,
    joined_rows,
    row_components,
    used_links,
)
from fabricflow.errors import SpecError
from fabricflow.workload.gpu import load_gpu
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import load_model


def job(gpus: int, tp: int = 2, pp: int = 1, model: str = "megatron-1.7b", order="tp-cp-ep-dp-pp"):
    """A JobSpec-like namespace with the fields the interference model reads."""
    layout = Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=1, global_batch=gpus)
    return types.SimpleNamespace(
        id=f"{model}-{gpus}",
        model=load_model(model),
        gpu=load_gpu("h100-sxm"),
        gpus=gpus,
        layout=layout,
        order=order,
        precision="bf16",
        seq_len=layout.seq_len,
        global_batch=layout.global_batch,
        priority=0,
        arrival_s=0.0,
        steps=10,
        duration_s=None,
    )


@lru_cache(maxsize=1)
def oversubscribed():
    """256 H100 in 8-GPU servers, ToR-attached, 4:1 leaves (2 servers per leaf), 4 spines."""
    return ff.load_fabric(
        "dgx-h100-superpod",
        gpus=256,
        topology={
            "attachment": "tor",
            "tiers": [
                {"name": "leaf", "down_ports": 16, "up_ports": 4, "latency": "0.6us"},
                {"name": "spine", "down_ports": 16},
            ],
        },
    )


def servers(ids) -> np.ndarray:
    return (np.asarray(ids)[:, None] * 8 + np.arange(8)).reshape(-1)


def standalone(spec, fabric):
    return ff.step_time(spec.model, spec.gpu, spec.layout, fabric, order=spec.order)


def interleaved_pair():
    """The 4:1 fabric, a 32-GPU job, its standalone step and an :class:`Interference` with
    two copies of the job, keys 0 and 1, on servers 0,2,4,6 and 1,3,5,7: every leaf of
    0..3 holds one server of each job, so they share the leaf uplinks."""
    fabric = oversubscribed()
    spec = job(32)
    alone = standalone(spec, fabric)
    inter = Interference(fabric)
    inter.add(0, spec, alone, servers([0, 2, 4, 6]))
    inter.add(1, spec, alone, servers([1, 3, 5, 7]))
    return fabric, spec, alone, inter


def uplinks_of_gpu0(fabric) -> np.ndarray:
    """The leaf-to-spine links of the leaf that GPU 0's NIC attaches to."""
    nic = fabric.links_of_kind("nic")
    leaf0 = int(fabric.link_dst[nic[fabric.link_src[nic] == fabric.gpu_node[0]][0]])
    uplinks = fabric.links_of_kind("leaf")
    return uplinks[fabric.link_src[uplinks] == leaf0]


def test_alone_at_gpus_0_to_n_is_the_standalone_step():
    fabric = ff.load_fabric("dgx-h100-superpod")
    for spec in (job(64, tp=2), job(32, tp=2, pp=2, order="tp-cp-ep-pp-dp")):
        alone = standalone(spec, fabric)
        inter = Interference(fabric)
        inter.add(0, spec, alone, np.arange(spec.gpus))
        assert inter.step_times()[0] == alone.step_time_s  # exactly


def test_jobs_sharing_oversubscribed_uplinks_both_slow_down():
    fabric, spec, alone, inter = interleaved_pair()
    times = inter.step_times()
    for key in (0, 1):
        # the shared uplinks take rate from rows of each job, against its own rates
        job = inter._jobs[key]
        assert job.own_rate is not None
        assert np.min(inter._load[key] / job.own_rate) < 0.9
        assert times[key] > inter.alone_s(key)
    # the spread placement alone is what each job pays before sharing
    assert inter.alone_s(0) >= alone.step_time_s * (1 - 1e-9)
    assert inter.stats["solves"] == 1 and inter.stats["flows_last"] > 0


def test_jobs_on_disjoint_leaves_do_not_interfere_and_are_not_resolved():
    fabric = oversubscribed()
    spec = job(32)
    alone = standalone(spec, fabric)
    inter = Interference(fabric)
    inter.add(0, spec, alone, servers([0, 1, 2, 3]))  # leaves 0, 1
    inter.add(1, spec, alone, servers([4, 5, 6, 7]))  # leaves 2, 3
    times = inter.step_times()
    assert times[0] == pytest.approx(alone.step_time_s, rel=1e-9)
    assert times[1] == pytest.approx(alone.step_time_s, rel=1e-9)
    assert inter.stats["solves"] == 0 and inter.stats["components_last"] == 2


def test_only_the_changed_component_is_resolved():
    fabric, spec, alone, inter = interleaved_pair()
    first = inter.step_times()
    inter.add(2, spec, alone, servers([8, 9, 10, 11]))  # leaves 4, 5: its own component
    second = inter.step_times()
    assert inter.stats["solves"] == 1  # the shared pair was not solved again
    assert second[0] == first[0] and second[1] == first[1]
    inter.remove(1)
    assert inter.step_times()[0] == pytest.approx(inter.alone_s(0), rel=1e-12)
    assert set(inter.step_times()) == {0, 2}


def test_joint_rates_equal_a_brute_force_union_solve():
    """The joint solve (identical flows merged, unconnected rows left alone) gives the link
    loads of one max-min over every flow of both jobs, unmerged, solved by the textbook
    progressive-filling loop (float64; the reference ff.max_min_rates is tested against;
    the jitted solver itself compiles for tens of seconds at this row width)."""
    from reference_solvers import progressive_filling

    from fabricflow.collective.flow_rates import effective_capacity

    fabric, spec, alone, inter = interleaved_pair()
    got = inter.link_load()
    links, coef = [], []
    for key in (0, 1):
        job_links, job_coef = inter.flows(key)
        links.append(job_links)
        coef.append(job_coef)
    width = max(x.shape[1] for x in links)
    pad = [np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=-1) for x in links]
    padc = [np.pad(x, ((0, 0), (0, width - x.shape[1]))) for x in coef]
    all_links, all_coef = np.concatenate(pad), np.concatenate(padc)
    cost = inter._jobs[0].model.sets[0].cost
    capacity = effective_capacity(fabric, cost)
    rate = np.asarray(progressive_filling(all_links, capacity, coef=all_coef), dtype=np.float64)
    valid = all_links >= 0
    want = np.bincount(
        all_links[valid],
        weights=(rate[:, None] * all_coef)[valid],
        minlength=fabric.num_links,
    )
    scale = want.max()
    np.testing.assert_allclose(got / scale, want / scale, atol=1e-9)
    # the shared uplinks are full: max-min leaves no bottleneck idle
    up = fabric.links_of_kind("leaf")
    assert np.max(got[up] / capacity[up]) == pytest.approx(1.0, rel=1e-5)


def test_failed_uplink_reroutes_and_slows_the_job():
    fabric = oversubscribed()
    spec = job(32)
    alone = standalone(spec, fabric)
    inter = Interference(fabric)
    inter.add(0, spec, alone, servers([0, 2, 4, 6]))
    before = inter.step_times()[0]
    # fail 3 of the 4 uplinks of leaf 0: its cross-leaf traffic squeezes into one
    inter.set_fabric(fabric.without(links=uplinks_of_gpu0(fabric)[:3]))
    after = inter.step_times()[0]
    assert after > 1.2 * before
    assert inter.stats["prepared"] == 2  # re-routed once


def test_traffic_shape_counts_only_traffic_leaving_a_server():
    inside = job(8, tp=8)  # one server, TP only
    spread = job(64, tp=8)  # DP across 8 servers
    assert job_traffic_shape(inside, gpus_per_node=8).network_bytes_per_step == 0
    shape = job_traffic_shape(spread, gpus_per_node=8)
    assert shape.network_bytes_per_step == pytest.approx(shape.bytes_per_step["dp"])
    assert shape.network_bytes_per_step > 0


def test_bad_inputs_are_refused():
    fabric = oversubscribed()
    with pytest.raises(SpecError, match="routing"):
        Interference(fabric, routing="nope")
    inter = Interference(fabric)
    spec = job(32)
    with pytest.raises(SpecError, match="gpus"):
        inter.add(0, spec, None, np.arange(16))
    inter.add(0, spec, None, servers([0, 1, 2, 3]))
    with pytest.raises(SpecError, match="already running"):
        inter.add(0, spec, None, servers([4, 5, 6, 7]))


def test_a_job_restarted_elsewhere_under_the_same_key_is_resolved():
    fabric, spec, alone, inter = interleaved_pair()
    inter.step_times()
    inter.remove(0)
    moved = servers([0, 2, 8, 9])  # still shares leaves 0 and 1 with job 1
    inter.add(0, spec, alone, moved)
    fresh = Interference(fabric)
    fresh.add(0, spec, alone, moved)
    fresh.add(1, spec, alone, servers([1, 3, 5, 7]))
    assert inter.step_times() == pytest.approx(fresh.step_times(), rel=1e-12)


def test_a_job_cut_off_by_failed_links_is_reported_and_removed():
    fabric = oversubscribed()
    spec = job(32)
    inter = Interference(fabric)
    inter.add(0, spec, None, servers([0, 2, 4, 6]))
    inter.add(1, spec, None, servers([8, 9, 10, 11]))
    assert inter.set_fabric(fabric.without(links=uplinks_of_gpu0(fabric))) == [0]
    assert set(inter.step_times()) == {1}


def test_joined_rows_are_the_components_that_hold_a_shared_link():
    """Rows chained through shared links to a link two jobs use are joined; checked
    against networkx components of the row-link graph on random instances."""
    import networkx as nx

    rng = np.random.default_rng(0)
    for _ in range(100):
        rows, num_links = int(rng.integers(1, 40)), int(rng.integers(1, 60))
        row_entries = rng.integers(1, 5, rows)
        entry_link = rng.integers(0, num_links, int(row_entries.sum()))
        row_job = rng.integers(0, int(rng.integers(1, 5)), rows)
        entry_row = np.repeat(np.arange(rows), row_entries)
        graph = nx.Graph()
        graph.add_nodes_from(range(rows))
        graph.add_edges_from(zip(entry_row.tolist(), (rows + entry_link).tolist()))
        jobs_on = {}
        for row, link in zip(entry_row.tolist(), entry_link.tolist()):
            jobs_on.setdefault(link, set()).add(int(row_job[row]))
        shared = {rows + link for link, jobs in jobs_on.items() if len(jobs) >= 2}
        expected = np.zeros(rows, dtype=bool)
        for component in nx.connected_components(graph):
            if component & shared:
                expected[[n for n in component if n < rows]] = True
        assert np.array_equal(joined_of(row_entries, entry_link, row_job, num_links), expected)


class Rows(NamedTuple):
    """The row fields of a placed job that :func:`joined_rows` reads."""

    row_entries: np.ndarray
    entry_link: np.ndarray
    link_ids: np.ndarray
    row_component: np.ndarray


def joined_of(row_entries, entry_link, row_job, num_links):
    """:func:`joined_rows` of rows given as flat arrays (``row_job``: each row's job), in
    the rows' order: each job's rows gathered and labelled as a placement labels them."""
    entry_row = np.repeat(np.arange(row_entries.size), row_entries)
    jobs, order = [], []
    for job in range(int(row_job.max(initial=-1)) + 1):
        rows = np.flatnonzero(row_job == job)
        entries = entry_link[np.isin(entry_row, rows)]
        counts = row_entries[rows]
        jobs.append(Rows(counts, entries, np.unique(entries), row_components(counts, entries)))
        order.append(rows)
    joined = joined_rows(jobs, np.full(num_links, -1, dtype=np.int64))
    out = np.zeros(row_entries.size, dtype=bool)
    out[np.concatenate(order)] = joined
    return out


def test_merged_rows_rebuild_every_flow_and_survive_hash_collisions(monkeypatch):
    from fabricflow.cluster import interference

    rng = np.random.default_rng(7)
    for trial in range(30):
        links, coefs = [], []
        for _ in range(int(rng.integers(1, 4))):
            base = rng.integers(-1, 20, size=(int(rng.integers(1, 6)), int(rng.integers(1, 5))))
            base[:, 0] = rng.integers(0, 20, size=base.shape[0])
            rows = base[rng.integers(0, base.shape[0], size=int(rng.integers(1, 15)))]
            coef = np.where(rows >= 0, 0.5 + (rows % 3), 0.0)
            links.append(rows)
            coefs.append(coef)
        if trial == 20:  # every hash equal: the exact fallback must still be right
            monkeypatch.setattr(interference, "_HASH", np.zeros(4096, dtype=np.uint64))
        inverse, count, row_entries, entry_link, entry_coef = interference.merged_rows(links, coefs)
        starts = np.concatenate([[0], np.cumsum(row_entries)])
        flows = [(s, f) for s, lk in enumerate(links) for f in range(lk.shape[0])]
        assert inverse.size == len(flows) and count.sum() == len(flows)
        for index, (s, f) in enumerate(flows):
            row = inverse[index]
            used = (links[s][f] >= 0) & (coefs[s][f] > 0)
            got = entry_link[starts[row] : starts[row + 1]]
            np.testing.assert_array_equal(got, links[s][f][used])
            np.testing.assert_allclose(
                entry_coef[starts[row] : starts[row + 1]] / count[row], coefs[s][f][used]
            )
        # rows of different sets never merge
        set_of_flow = np.array([s for s, _ in flows])
        for row in range(count.size):
            assert np.unique(set_of_flow[inverse == row]).size == 1


def test_used_links_are_numpy_unique_with_inverse():
    rng = np.random.default_rng(5)
    for size, span in ((0, 1), (7, 10**6), (50_000, 1000), (3000, 3000), (1, 1)):
        entries = rng.integers(0, span, size)
        links, local = used_links(entries)
        want, inverse = np.unique(entries, return_inverse=True)
        assert np.array_equal(links, want) and np.array_equal(local, inverse.reshape(-1))


@lru_cache(maxsize=1)
def full_bisection():
    """256 H100 in 8-GPU servers, ToR-attached, 1:1 leaves (2 servers per leaf), 16 spines."""
    return ff.load_fabric(
        "dgx-h100-superpod",
        gpus=256,
        topology={
            "attachment": "tor",
            "tiers": [
                {"name": "leaf", "down_ports": 16, "up_ports": 16, "latency": "0.6us"},
                {"name": "spine", "down_ports": 16},
            ],
        },
    )


def test_a_component_whose_alone_rates_fit_is_not_solved_and_equals_the_solve(monkeypatch):
    """Two tp=8 jobs interleaved on 1:1 leaves share uplinks without filling them: their
    alone rates are the joint max-min rates, taken without a solve; with the shortcut
    off, the max-min solve gives the same link loads and step times. Two jobs on 4:1
    leaves contend: solved."""
    from fabricflow.cluster import interference

    fabric = full_bisection()

    def pair(tp):
        spec = job(16, tp=tp)
        inter = Interference(fabric)
        inter.add(0, spec, None, servers([0, 2]))
        inter.add(1, spec, None, servers([1, 3]))
        return inter, inter.step_times(), inter.link_load()

    fast, times, load = pair(8)
    assert fast.stats["solves"] == 1 and fast.stats["solves_skipped"] == 1
    assert fast.stats["components_last"] == 1  # they do share links
    monkeypatch.setattr(interference, "FIT_RTOL", -1.0)  # nothing fits: always solve
    slow, slow_times, slow_load = pair(8)
    assert slow.stats["solves_skipped"] == 0
    assert times == pytest.approx(slow_times, rel=1e-12)
    np.testing.assert_allclose(load, slow_load, rtol=1e-9, atol=1e-9 * load.max())
    monkeypatch.setattr(interference, "FIT_RTOL", 1e-9)
    _, _, _, contended = interleaved_pair()  # 4:1 leaves: the uplinks do not hold both
    contended_times = contended.step_times()
    assert contended.stats["solves_skipped"] == 0
    assert contended_times[0] > contended.alone_s(0)


def test_a_repair_back_to_the_healthy_fabric_takes_the_healthy_placement_back():
    fabric = oversubscribed()
    spec = job(32)
    inter = Interference(fabric)
    inter.add(0, spec, None, servers([0, 2, 4, 6]))
    before = inter.step_times()[0]
    inter.set_fabric(fabric.without(links=uplinks_of_gpu0(fabric)[:3]))
    assert inter.step_times()[0] > 1.2 * before
    assert inter.stats["prepared"] == 2
    inter.set_fabric(fabric)  # repaired: the job's placement on the healthy fabric again
    assert inter.stats["prepared"] == 2 and inter.stats["placements_kept"] == 1
    assert inter.step_times()[0] == before
    fresh = Interference(fabric)
    fresh.add(0, spec, None, servers([0, 2, 4, 6]))
    np.testing.assert_array_equal(inter.link_load(), fresh.link_load())
