"""Per-host netlists (CSV) -> fabrics: the host -> ToR -> aggregation -> core table a
cabling database or an LLDP crawl exports.

Format: a CSV with the header ``host,tor,agg,core`` and one row per host::

    host,tor,agg,core
    gpu-a001,tor-a1,agg-a,core0
    gpu-a002,tor-a1,agg-a,core0

Switch ids are names. A switch name repeated under two parents is two switches (the
ToRs ``t1`` of two aggregation switches are different boxes): a ToR is its
(tor, agg, core) path, an aggregation switch its (agg, core) pair, a core switch its
name. Trailing levels may be left empty on every row (``host,tor,,``: one tier;
``host,tor,agg,``: two). The fabric is then built as a Slurm tree is
(:func:`fabricflow.fabric.slurm.slurm_fabric_spec`: ``gpus_per_node`` GPUs per host with
one NIC each, non-blocking uplinks unless ``oversubscription`` or ``switch_bandwidth``
say otherwise), with kinds ``tor``, ``agg`` and ``core``.

Checked, each error naming the file and line: the header, a host listed twice, a host
without a ToR (a GPU without a NIC), a level filled below an empty one (a cable to
nowhere: ``host,,agg,core``), a row whose levels are not those of the others (one host
with a core, another without), names with blanks or ``@``, and hosts that form separate
trees (several top switches: no path between them), control characters (a NUL) in a
name, and a switch name used at two levels (a ToR named as an aggregation switch).
"""

from __future__ import annotations

import csv
import io
import os

from fabricflow.errors import SpecError
from fabricflow.fabric.slurm import (
    SlurmTopology,
    check_import_size,
    checked_import_spec,
    import_options,
)
from fabricflow.schema import at_line

__all__ = ["HEADER", "netlist_spec_from_file", "read_netlist"]

HEADER = ("host", "tor", "agg", "core")
LEVELS = ("tor", "agg", "core")


def read_netlist(path: str | os.PathLike, *, gpus_per_node: int = 1) -> SlurmTopology:
    """The tree of a per-host netlist (module docs), as a :class:`SlurmTopology` whose
    switch names are unique (``t1@agg-a`` where a name repeats under two parents).

    ``gpus_per_node``: the GPUs each host will get; the file's lines are counted before
    it is read, and a file whose rows, or whose hosts at that many GPUs, would not fit the
    memory budget is refused then (:func:`fabricflow.fabric.slurm.check_import_size`).

    Raises:
        SpecError: ``netlist``, naming the file and line.
        MemoryBudgetError: the rows or GPUs would not fit (sizes and budget named).
    """
    name = os.fspath(path)
    try:
        lines = _count_lines(name)
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise SpecError("netlist", f"cannot read {name!r}: {error}") from error
    check_import_size(
        name, names=len(HEADER) * lines, nodes=max(lines - 1, 0), gpus_per_node=gpus_per_node
    )
    try:
        with open(name, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError("netlist", f"cannot read {name!r}: {error}") from error
    rows = list(csv.reader(io.StringIO(text)))
    numbered = [(n, [c.strip() for c in row]) for n, row in enumerate(rows, 1) if any(row)]
    if not numbered:
        raise SpecError("netlist", f"{name}: empty; expected the header {','.join(HEADER)}")
    number, header = numbered[0]
    if tuple(header) != HEADER:
        raise SpecError(
            "netlist",
            f"{at_line(name, number)}: expected the header {','.join(HEADER)}, got {','.join(header)}",
        )
    paths: dict[str, tuple] = {}
    level_of: dict[str, tuple[int, int]] = {}  # switch name -> (level, first line)
    depth = None
    for number, row in numbered[1:]:
        host, levels = _row(row, number, name)
        if host in paths:
            raise SpecError("netlist", f"{at_line(name, number)}: host {host!r} is listed twice")
        for level, switch in enumerate(levels):
            first = level_of.setdefault(switch, (level, number)) if switch else (level, 0)
            if first[0] != level:
                raise SpecError(
                    "netlist",
                    f"{at_line(name, number)}: the {LEVELS[level]} {switch!r} has the name of "
                    f"the {LEVELS[first[0]]} on line {first[1]}: a switch is at one level "
                    "(name switches of different levels apart)",
                )
        filled = sum(1 for level in levels if level)
        if depth is None:
            depth = filled
        elif filled != depth:
            raise SpecError(
                "netlist",
                f"{at_line(name, number)}: {filled} switch level(s), the rows above have "
                f"{depth}: every host needs the same levels ({', '.join(LEVELS[:depth])})",
            )
        paths[host] = tuple(levels[:filled])
    if not paths:
        raise SpecError("netlist", f"{name}: no host rows below the header")
    return _tree(paths, name)


def _count_lines(name: str) -> int:
    """Lines of the file ``name``, counted a megabyte at a time (nothing kept)."""
    lines, last = 0, b"\n"
    with open(name, "rb") as handle:
        for chunk in iter(lambda: handle.read(2**20), b""):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def _row(row: list[str], number: int, name: str) -> tuple[str, list[str]]:
    if len(row) != len(HEADER):
        raise SpecError(
            "netlist", f"{at_line(name, number)}: {len(row)} fields, expected {len(HEADER)}"
        )
    for cell in row:
        if any(c in cell for c in " \t@"):
            raise SpecError("netlist", f"{at_line(name, number)}: a blank or '@' in {cell!r}")
        bad = next((c for c in cell if not c.isprintable()), None)
        if bad is not None:
            raise SpecError(
                "netlist",
                f"{at_line(name, number)}: the control character {bad!r} in {cell!r}: names "
                "are printable text",
            )
    host, *levels = row
    if not host:
        raise SpecError("netlist", f"{at_line(name, number)}: no host name")
    if not levels[0]:
        raise SpecError(
            "netlist", f"{at_line(name, number)}: host {host!r} has no ToR (a GPU without a NIC)"
        )
    for lower, upper, below, above in zip(levels, levels[1:], LEVELS, LEVELS[1:], strict=False):
        if upper and not lower:
            raise SpecError(
                "netlist",
                f"{at_line(name, number)}: {above} {upper!r} above an empty {below} (a cable to "
                "nowhere)",
            )
    return host, levels


def _tree(paths: dict[str, tuple], name: str) -> SlurmTopology:
    """Switches children-first, named uniquely (a name under two parents gets
    ``@parent`` suffixes), with their kinds."""
    depth = len(next(iter(paths.values())))
    switches: dict[str, tuple[list[str], list[str]]] = {}
    kinds: dict[str, str] = {}
    lower_label: dict[tuple, str] = {}
    for level in range(depth):  # tor, then agg, then core
        # (switch, parents...) in order of first appearance in the file
        identity = list(dict.fromkeys(path[level:] for path in paths.values()))
        by_name: dict[str, list[tuple]] = {}
        for ident in identity:
            by_name.setdefault(ident[0], []).append(ident)
        label = {
            ident: ident[0] if len(same) == 1 else "@".join(ident)
            for same in by_name.values()
            for ident in same
        }
        children: dict[tuple, list[str]] = {}
        if level == 0:
            for host, path in paths.items():
                children.setdefault(path, []).append(host)
        else:
            for ident in dict.fromkeys(path[level - 1 :] for path in paths.values()):
                children.setdefault(ident[1:], []).append(lower_label[ident])
        for ident in identity:
            key = label[ident]
            if level == 0:
                switches[key] = ([], children[ident])
            else:
                switches[key] = (children[ident], [])
            kinds[key] = LEVELS[level]
        lower_label = label
    roots = list(lower_label.values())
    if len(roots) > 1:
        raise SpecError(
            "netlist",
            f"{name}: the hosts form {len(roots)} separate trees (top switches "
            f"{', '.join(roots[:3])}{', ...' if len(roots) > 3 else ''}): hosts of one cannot "
            "reach another; a per-host row names one switch per level, so add the level "
            "that joins them (a core column naming one switch)",
        )
    return SlurmTopology("tree", switches, (), name, kinds, "netlist")


def netlist_spec_from_file(path: str, options: dict) -> dict:
    """The spec of ``load_fabric("netlist:PATH", ...)``: the options of
    :func:`fabricflow.fabric.slurm.slurm_fabric_spec` and ``companion``, as for Slurm
    files.

    Raises:
        SpecError: a missing or bad option, or a bad file (named).
    """
    values = import_options(options, "netlist")
    return checked_import_spec(read_netlist(path, gpus_per_node=values["gpus_per_node"]), values)
