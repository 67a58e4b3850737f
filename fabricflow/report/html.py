"""One self-contained HTML page from :func:`fabricflow.report.build.build_report`.

Figures are embedded as base64 PNG ``data:`` URIs and the style sheet is inline, so the
page makes no request: it can be mailed, attached to a review or opened offline. Every
piece of text (names, settings, error messages) is HTML-escaped.
"""

from __future__ import annotations

import base64
import datetime
import html
import math

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 70em; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.meta { color: #555; font-size: 0.9em; }
.settings { font-family: ui-monospace, monospace; font-size: 0.85em; color: #444; }
code { background: #f6f6f6; padding: 0.1em 0.3em; }
nav a { margin-right: 1em; }
"""


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _cell(value) -> tuple[str, bool]:
    """(text, numeric) of one table cell."""
    if value is None:
        return "-", False
    if isinstance(value, bool):
        return str(value), False
    if isinstance(value, int):
        return f"{value:,}", True
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value), True
        return f"{value:.4g}", True
    return str(value), False


def _table(table: dict) -> str:
    columns = table["columns"]
    head = "".join(f"<th>{_esc(header)}</th>" for _, header in columns)
    body = []
    for row in table["rows"]:
        cells = []
        for key, _ in columns:
            text, numeric = _cell(row.get(key))
            cells.append(
                f'<td class="num">{_esc(text)}</td>' if numeric else f"<td>{_esc(text)}</td>"
            )
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(columns)}">(no rows)</td></tr>')
    header = f"<thead><tr>{head}</tr></thead>" if any(h for _, h in columns) else ""
    return (
        f"<table><caption>{_esc(table['caption'])}</caption>{header}"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _figure(figure: dict) -> str:
    data = base64.b64encode(figure["png"]).decode("ascii")
    return (
        f'<figure id="fig-{_esc(figure["name"])}"><img alt="{_esc(figure["caption"])}" '
        f'src="data:image/png;base64,{data}"><figcaption>{_esc(figure["caption"])}'
        "</figcaption></figure>"
    )


def _settings(settings: dict) -> str:
    parts = ", ".join(f"{_esc(k)}={_esc(v)}" for k, v in settings.items())
    return f'<p class="settings">settings: {parts}</p>'


def fabricflow_version() -> str:
    """The installed fabricflow's version (package metadata: subpackages do not import the
    top-level package)."""
    from importlib import metadata

    try:
        return metadata.version("fabricflow")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def render_html(report: dict, *, version: str, command: str) -> str:
    """The page as a string: title, job, headline numbers, then one ``<section>`` per
    report section (``id`` = the section's id) with its text, settings, tables and
    figures. ``version``: the fabricflow version; ``command``: the command line (or call)
    that produced it, both shown at the top."""
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = report["headline"]
    headline_rows = [
        {"item": "layout", "value": head["layout"]},
        {"item": "step time", "value": f"{head['step_time_s']:.4g} s"},
        {"item": "MFU", "value": f"{100 * head['mfu']:.1f} %"},
        {"item": "tokens/s", "value": f"{head['tokens_per_s']:,.0f}"},
        {"item": "memory per GPU", "value": f"{head['memory_gib_per_gpu']:.1f} GiB"},
        {"item": "bisection (one way)", "value": f"{head['bisection_Bps'] * 8 / 1e12:,.1f} Tb/s"},
    ]
    if "step_command" in report:  # the command line adds it: the step timed, to repeat
        headline_rows.append({"item": "the same step alone", "value": report["step_command"]})
    if "best_layout" in head:
        headline_rows.append(
            {
                "item": "best layout found",
                "value": f"{head['best_layout']}: {head['best_step_time_s']:.4g} s "
                f"(the job's layout takes "
                f"{100 * (head['step_time_s'] / head['best_step_time_s'] - 1):.1f} % longer)"
                if head["best_step_time_s"] < head["step_time_s"]
                else f"{head['best_layout']}: {head['best_step_time_s']:.4g} s (none faster "
                "than the job's)",
            }
        )
    if "worst_failure_slowdown" in head:
        headline_rows.append(
            {
                "item": "worst slowdown under failures",
                "value": f"{100 * head['worst_failure_slowdown']:.2f} %",
            }
        )
    nav = "".join(f'<a href="#{_esc(s["id"])}">{_esc(s["title"])}</a>' for s in report["sections"])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # no request may leave the page: everything it shows is inline (the page has no
        # script; inline ones stay allowed for a reader's own checks)
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">",
        f"<title>fabricflow design review: {_esc(report['title'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Design review: {_esc(report['title'])}</h1>",
        f'<p class="meta">fabricflow {_esc(version)}, generated {_esc(created)} in '
        f"{report['seconds']:.0f} s by <code>{_esc(command)}</code></p>",
        f"<nav>{nav}</nav>",
        _table(
            {"caption": "Headline", "columns": [("item", ""), ("value", "")], "rows": headline_rows}
        ),
    ]
    for section in report["sections"]:
        parts.append(f'<section id="{_esc(section["id"])}">')
        parts.append(f"<h2>{_esc(section['title'])}</h2>")
        parts.append(f"<p>{_esc(section['text'])}</p>")
        parts.append(_settings(section["settings"]))
        parts.extend(_table(table) for table in section["tables"])
        parts.extend(_figure(figure) for figure in section["figures"])
        parts.append(f'<p class="meta">computed in {section["seconds"]:.1f} s</p></section>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["fabricflow_version", "render_html"]
