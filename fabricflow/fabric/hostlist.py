"""Slurm hostlist expressions: ``node[001-128,130]`` <-> ``node001 ... node128 node130``.

The forms Slurm writes and reads (``scontrol show hostnames`` / ``hostlist``):

* a comma-separated list of items at the top level (commas inside brackets belong to
  the bracket);
* in an item, every ``[...]`` is a list of numbers and ranges (``a-b``), expanded
  left to right, several brackets as a cross product (``r[1-2]n[1-2]`` -> ``r1n1 r1n2
  r2n1 r2n2``);
* a range keeps the width of its zero-padded start (``[08-10]`` -> ``08 09 10``).

Written here rather than taken from python-hostlist: that package is GPL-licensed (a
dependency would change what fabricflow's users may do with it), and the two functions
this module needs are small enough to test fully.
"""

from __future__ import annotations

import re

__all__ = ["HostlistError", "compress_hostlist", "expand_hostlist"]

MAX_HOSTS = 10_000_000  # names one expression may expand to (a typo like [1-99999999999])

_NAME = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A malformed hostlist expression; the message says what and where."""


def expand_hostlist(expression: str) -> list[str]:
    """The host names of ``expression``, in order, duplicates kept.

    Raises:
        HostlistError: unbalanced or nested brackets, an empty item or range, a range
            that runs backwards, or more than :data:`MAX_HOSTS` names.
    """
    names: list[str] = []
    for item in _split_top(expression):
        if not item:
            raise HostlistError(f"an empty item in {expression!r}")
        names.extend(_expand_item(item, expression))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"{expression!r} expands to more than {MAX_HOSTS:,} names")
    return names


def _split_top(expression: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in expression:
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {expression!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"a ']' without '[' in {expression!r}")
        if char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"a '[' without ']' in {expression!r}")
    items.append("".join(current).strip())
    return items


def _expand_item(item: str, expression: str) -> list[str]:
    parts = re.split(r"\[([^\]]*)\]", item)  # text, bracket, text, bracket, ..., text
    names = [""]
    for index, part in enumerate(parts):
        if index % 2 == 0:
            if any(c in part for c in " \t"):
                raise HostlistError(f"a blank inside the name {item!r} in {expression!r}")
            names = [name + part for name in names]
            continue
        values = _bracket(part, expression)
        if len(names) * len(values) > MAX_HOSTS:
            raise HostlistError(f"{expression!r} expands to more than {MAX_HOSTS:,} names")
        names = [name + value for name in names for value in values]
    return names


def _bracket(body: str, expression: str) -> list[str]:
    values: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        low, dash, high = piece.partition("-")
        if (
            not low.isdigit()
            or not low.isascii()
            or (dash and not (high.isdigit() and high.isascii()))
        ):
            raise HostlistError(f"[{body}] in {expression!r}: {piece!r} is not N or N-M")
        if not dash:
            values.append(low)
            continue
        first, last = int(low), int(high)
        if last < first:
            raise HostlistError(f"[{body}] in {expression!r}: the range {piece!r} runs backwards")
        if last - first >= MAX_HOSTS:
            raise HostlistError(f"{expression!r} expands to more than {MAX_HOSTS:,} names")
        width = len(low) if low.startswith("0") else 0
        values.extend(str(number).zfill(width) for number in range(first, last + 1))
    return values


def compress_hostlist(names: list[str]) -> str:
    """A hostlist expression of ``names``, their order kept: neighbours that share a
    prefix and count up by one become one range, ranges of one prefix one bracket
    (``node[001-004,007]``). ``expand_hostlist(compress_hostlist(x)) == x`` for names
    without ``,[]`` or blanks."""
    items: list[tuple[str, str, str]] = []  # (prefix, first digits, last digits)
    for name in names:
        match = _NAME.match(name)
        if match is None:
            items.append((name, "", ""))
            continue
        prefix, digits = match.group(1), match.group(2)
        if items and items[-1][0] == prefix and items[-1][1]:
            _, first, last = items[-1]
            width = len(first) if first.startswith("0") else 0
            if int(digits) == int(last) + 1 and str(int(digits)).zfill(width) == digits:
                items[-1] = (prefix, first, digits)
                continue
        items.append((prefix, digits, digits))
    out: list[str] = []
    previous = None
    for prefix, first, last in items:
        if not first:
            out.append(prefix)
            previous = None
            continue
        piece = first if first == last else f"{first}-{last}"
        if previous == prefix and out[-1].endswith("]"):
            out[-1] = out[-1][:-1] + "," + piece + "]"
        elif first == last:
            out.append(prefix + first)
        else:
            out.append(f"{prefix}[{piece}]")
        previous = prefix
    return ",".join(out)
