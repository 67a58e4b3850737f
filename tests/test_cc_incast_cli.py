"""``fabricflow cc`` on an incast: the flow count, roles, victims, text, plot and help agree.

``--flows N`` of the incast means N senders plus one victim flow; the help says so, the
text and JSON name the roles, every role is shown (the victim is never cut off), the
victim flows are the flows PFC slows without a congestion point of their own, and the
rate plot draws every role.
"""

from __future__ import annotations

import contextlib
import io
import json
import types

import numpy as np
import pytest

from fabricflow.cli import main
from fabricflow.dynamics.scenarios import incast
from fabricflow.dynamics.summaries import select_flows
from fabricflow.solve.pfc.victims import victim_flows

INCAST = ["cc", "--scenario", "incast", "--flows", "16", "--link-bandwidth", "40Gbps"]


@pytest.fixture(scope="module")
def incast_report(tmp_path_factory):
    """One run for every test here (a run compiles its kernel): its exit code, the
    summary.json it wrote, the --out folder and the text it printed."""
    out = tmp_path_factory.mktemp("incast")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main([*INCAST, "--duration", "10ms", "--out", str(out)])
    return code, json.loads((out / "summary.json").read_text()), out, text.getvalue()


def test_incast_flow_count_roles_and_victims_agree(incast_report):
    code, report, _, _ = incast_report
    assert code == 0
    assert report["flows"] == 17
    assert report["flow_roles"] == "16 incast + 1 victim = 17 flows"
    assert report["roles"]["victim"] == [16]
    assert report["victim_flows"] == report["roles"]["victim"]
    assert report["role_summary"]["incast"]["flows"] == 16
    assert report["role_summary"]["victim"]["ids"] == [16]


def test_text_shows_every_role_and_marks_the_victim(incast_report):
    code, _, _, text = incast_report
    assert code == 0
    assert "16 incast + 1 victim = 17 flows" in text
    assert "incast 16 flows" in text and "flow  16" in text
    assert "first 16 of 17" not in text


def test_help_states_the_defaults_and_the_victim(capsys):
    with pytest.raises(SystemExit):
        main(["cc", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default: 40Gbps)" in help_text
    assert "plus 1 victim flow" in help_text
    assert "(default: dcqcn)" in help_text


def test_rate_plot_draws_every_role(incast_report):
    from fabricflow.plots.congestion import plot_rates_and_queues

    _, _, out, _ = incast_report
    assert (out / "rates_queues.png").stat().st_size > 0
    sc = incast(16)
    chosen = select_flows(sc.roles, sc.routes.num_flows, 16)
    assert 16 in chosen and len(chosen) <= 16
    assert select_flows({"a": [0, 1], "b": list(range(2, 100))}, 100, 5)[:2] == [0, 1]
    # A result-like object is enough for the figure.
    res = types.SimpleNamespace(
        num_flows=17,
        time=np.linspace(1e-3, 1e-2, 10),
        start=np.zeros(17),
        finish_time=np.full(17, np.inf),
        rate=np.ones((10, 17)),
        queue=np.zeros((10, 4)),
        cc="dcqcn",
        pfc_mode="static",
    )
    fig = plot_rates_and_queues(res, roles=sc.roles)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["incast (16 flows)", "victim (1 flow)"]


def test_flows_through_a_congestion_point_are_never_victims():
    # Incast flows slowed and paused at an underused bottleneck (as DCQCN + PFC can leave
    # it) are not victims; the victim, whose path has no congestion point, is.
    sc = incast(4)
    flows = sc.routes.num_flows
    ideal = np.array([1.25e9] * 4 + [5e9])  # C/4 each; the victim at line rate
    rate = np.array([0.8e9] * 4 + [1e9])  # everybody well below max-min
    res = types.SimpleNamespace(
        links=sc.routes.links,
        capacity=sc.fabric.capacity,
        flow_pause_time=np.full(flows, 1e-3),
        start=np.zeros(flows),
        finish_time=np.full(flows, np.inf),
        duration=0.01,
        mean_rate=lambda since=None: rate,
    )
    assert np.flatnonzero(victim_flows(res, ideal)).tolist() == sc.roles["victim"]
