"""``fabricflow report``: the design-review page, rendered in a real headless browser.

One small report (Llama-3-8B on 16 H100 of dgx-h100-superpod, a given TP 8 layout
scattered over the fabric, a 1 s layout search, one failure fraction) is generated once
per module; the tests read it as a user's browser would, and check its numbers against
the library it comes from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import fabricflow as ff
from fabricflow.report.build import SECTIONS

REPORT = [
    "report",
    "--fabric",
    "dgx-h100-superpod",
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "16",
    "--tp",
    "8",
    "--placement",
    "scattered",
    "--budget",
    "1",
    "--top-k",
    "3",
    "--fail-fractions",
    "0.25",
    "--fail-seeds",
    "1",
]
CHROMIUM = "/usr/bin/chromium"
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Marks every <img> with whether it decoded (complete, natural size > 0) once the page
# has loaded; --dump-dom then prints the marked DOM.
MARK_IMAGES = """<script>
window.addEventListener('load', () => {
  for (const img of document.images) {
    const ok = img.complete && img.naturalWidth > 0 && img.naturalHeight > 0;
    img.setAttribute('data-loaded', ok ? 'yes' : 'no');
    img.setAttribute('data-size', img.naturalWidth + 'x' + img.naturalHeight);
  }
  document.body.setAttribute('data-checked', 'yes');
});
</script>"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(the --json object, the page's text) of the small report, made in this process."""
    import contextlib
    import io

    from fabricflow.cli import main

    out = tmp_path_factory.mktemp("report")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main([*REPORT, "--out", str(out), "--json"])
    assert code == 0, stdout.getvalue()
    data = json.loads(stdout.getvalue())
    with open(data["report"], encoding="utf-8") as handle:
        return data, handle.read()


def test_json_is_one_object_with_the_path_and_headline(report):
    data, _ = report
    assert data["sections"] == list(SECTIONS)
    assert data["figures"] >= len(SECTIONS)
    assert os.path.basename(data["report"]) == "report.html"
    for key in ("step_time_s", "mfu", "memory_gib_per_gpu", "layout", "bisection_Bps"):
        assert key in data
    # dgx-h100-superpod: 1,024 GPUs at 400 Gb/s behind a 1:1 two-tier fabric
    assert data["bisection_Bps"] == pytest.approx(512 * 50e9)


def test_headline_step_equals_the_step_model(report):
    """The page reports what ff.step_time gives for the same job, not a copy of its own."""
    data, _ = report
    job = data["job"]
    layout = ff.Layout(**{k: v for k, v in job["layout"].items() if k != "pp_split"})
    result = ff.step_time(
        "llama3-8b",
        "h100-sxm",
        layout,
        ff.load_fabric("dgx-h100-superpod"),
        order=job["order"],
        placement=job["placement"],
    )
    assert data["step_time_s"] == pytest.approx(result.step_time_s, rel=1e-9)
    assert data["mfu"] == pytest.approx(result.mfu, rel=1e-9)
    # the 1 s search tries TP 1 first: with 16 GPUs it beats the given TP 8
    assert data["best_step_time_s"] <= data["step_time_s"]


def test_page_is_self_contained(report):
    _, page = report
    assert 'src="http' not in page and "<link" not in page
    assert not re.search(r"https?://", page), "the page names an external URL"
    # every src/href stays inside the page: a data: URI or an anchor
    for target in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert target.startswith(("data:image/png;base64,", "#")), target
    for section in SECTIONS:
        assert f'<section id="{section}">' in page
    assert "fabricflow " + ff.__version__ in page
    # the command that reproduces it, every flag given
    assert "fabricflow report --fabric dgx-h100-superpod --model llama3-8b --gpu h100-sxm" in page
    assert "--tp 8" in page and "--placement scattered" in page and "--budget 1.0" in page


def test_tables_hold_physical_numbers(report):
    """Utilization in [0, 1] by tier; failures never speed the step up."""
    _, page = report
    section = page.split('<section id="utilization">')[1].split("</section>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", section)
    values = [re.findall(r'<td class="num">([^<]*)</td>', row) for row in rows[1:]]
    assert values, "no utilization rows"
    for cells in values:  # links, carrying, mean, p99, max, saturated
        mean, p99, peak = (float(c) for c in cells[2:5])
        assert 0 <= mean <= p99 + 1e-9 <= peak + 2e-9 <= 1 + 1e-3
    failures = page.split('<section id="failures">')[1].split("</section>")[0]
    assert "25" in failures  # the fraction asked
    slowdown = re.findall(r'<td class="num">([^<]*)</td>', failures.split("<tbody>")[1])
    assert float(slowdown[-1]) >= 0


def test_collective_utilization_matches_the_solved_rates():
    """A TP all-reduce inside one NVLink domain: all NVLink links saturated by the ring
    or NVLS phases, no network link used."""
    from fabricflow.collective import prepare_collective
    from fabricflow.report.build import collective_utilization

    fabric = ff.load_fabric("dgx-h100-superpod")
    groups = np.arange(16).reshape(2, 8)
    prepared = prepare_collective(fabric, "all_reduce", groups)
    peak, algorithm = collective_utilization(prepared, 256 * 2**20)
    assert algorithm in {s.algorithm.name for s in prepared.solved}
    assert peak.max() <= 1 + 1e-6 and peak.min() >= 0
    network = np.isin(fabric.link_kind, ["nic", "leaf"])
    assert peak[network].max() == 0
    assert peak[fabric.link_kind == "nvlink"].max() == pytest.approx(1, rel=1e-3)


@pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) or shutil.which("chromium")),
    reason="no chromium binary (.ci/run installs Debian's chromium package)",
)
def test_every_figure_loads_in_a_headless_browser(report, tmp_path):
    data, page = report
    marked = page.replace("</body>", MARK_IMAGES + "</body>")
    path = tmp_path / "marked.html"
    path.write_text(marked, encoding="utf-8")
    binary = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    proc = subprocess.run(
        [
            binary,
            *BROWSER_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'data-checked="yes"' in dom, "the marking script did not run"
    images = re.findall(r"<img\b[^>]*>", dom)
    assert len(images) == data["figures"]
    for image in images:
        assert 'data-loaded="yes"' in image, image[:200] + " ... " + image[-200:]
        width, height = map(int, re.search(r'data-size="(\d+)x(\d+)"', image).groups())
        assert width > 100 and height > 100
    for section in SECTIONS:
        assert f'id="{section}"' in dom


def test_render_escapes_text():
    from fabricflow.report.html import render_html

    report = {
        "title": "<script>alert(1)</script>",
        "seconds": 1.0,
        "headline": {
            "step_time_s": 1.0,
            "mfu": 0.5,
            "tokens_per_s": 1.0,
            "memory_gib_per_gpu": 1.0,
            "layout": "TP1 & <b>",
            "bisection_Bps": 1e12,
        },
        "sections": [
            {
                "id": "step",
                "title": "a <title>",
                "text": 'quote " and <tag>',
                "settings": {"x": "<y>"},
                "tables": [{"caption": "c", "columns": [("a", "A")], "rows": [{"a": "<td>"}]}],
                "figures": [],
                "seconds": 0.1,
            }
        ],
    }
    page = render_html(report, version="0", command="fabricflow report --model '<m>'")
    assert "<script>" not in page and "<tag>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "&lt;td&gt;" in page


@pytest.mark.parametrize(
    "change, field",
    [
        (("--fabric", "no-such-fabric"), "fabric"),
        (("--model", "no-such-model"), "model"),
        (("--gpus", "4096"), "--gpus"),
        (("--fail-fractions", "0.5,2"), "--fail-fractions"),
        (("--tp", "3"), "--gpus"),
    ],
)
def test_bad_input_exits_2_naming_the_field(capsys, tmp_path, change, field):
    from fabricflow.cli import main

    args = list(REPORT)
    flag, value = change
    args[args.index(flag) + 1] = value
    code = main([*args, "--out", str(tmp_path / "out"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 2, data
    assert field in data["message"], data
    assert not (tmp_path / "out").exists()  # nothing computed, nothing written


def test_budget_zero_needs_a_layout(capsys, tmp_path):
    from fabricflow.cli import main

    args = [*REPORT[:9], "--budget", "0", "--out", str(tmp_path), "--json"]
    assert main(args) == 2
    assert "--budget" in json.loads(capsys.readouterr().out)["message"]


def test_failures_slow_a_job_whose_gradients_cross_the_spine():
    """TP 8 x DP 128 on all 1,024 GPUs: the DP reduce-scatter saturates the leaf-spine
    cables, so failing 30 % of them must slow the step, and never speed it up."""
    from fabricflow.report.build import build_report

    fabric = ff.load_fabric("dgx-h100-superpod")
    layout = ff.Layout(tp=8, dp=128, micro_batch=1, global_batch=1024, seq_len=4096)
    report = build_report(
        fabric, "llama3-8b", "h100-sxm", 1024, layout=layout, budget_s=0,
        fail_fractions=(0.3,), fail_seeds=1,
    )  # fmt: skip
    assert [s["id"] for s in report["sections"]] == [
        "fabric",
        "step",
        "utilization",
        "failures",
        "cost",
    ]
    utilization = report["sections"][2]["tables"][0]["rows"]
    leaf = [r for r in utilization if r["collective"].startswith("dp") and r["kind"] == "leaf"]
    assert leaf and leaf[0]["max"] == pytest.approx(1, rel=1e-3)
    (row,) = report["sections"][3]["tables"][0]["rows"]
    assert row["failed"] == round(0.3 * 1024)  # 1,024 leaf-spine cables in 512 bundles
    assert row["slowdown_pct"] > 0 and row["max_s"] > report["headline"]["step_time_s"]
    assert report["headline"]["worst_failure_slowdown"] == pytest.approx(row["slowdown_pct"] / 100)


def test_library_refuses_bad_arguments_before_computing():
    from fabricflow.errors import SpecError
    from fabricflow.report.build import build_report

    fabric = ff.load_fabric("dgx-h100-superpod")
    for kwargs, field in (
        ({"fail_kind": "bogus"}, "fail_kind"),
        ({"fail_fractions": (0.0,)}, "fail_fractions"),
        ({"fail_seeds": 0}, "fail_seeds"),
        ({"budget_s": 0}, "budget_s"),  # no layout to review without the search
        ({"top_k": 0}, "top_k"),
    ):
        with pytest.raises(SpecError) as error:
            build_report(fabric, "llama3-8b", "h100-sxm", 16, **kwargs)
        assert error.value.field == field
    with pytest.raises(SpecError, match="gpus"):
        build_report(fabric, "llama3-8b", "h100-sxm", 2048)
