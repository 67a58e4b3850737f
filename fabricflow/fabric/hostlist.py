"""Slurm hostlist expressions: ``node[001-128,130]`` <-> ``node001 ... node128 node130``.

The forms Slurm writes and reads (``scontrol show hostnames`` / ``hostlist``):

* a comma-separated list of items at the top level (commas inside brackets belong to
  the bracket);
* in an item, every ``[...]`` is a list of numbers and ranges (``a-b``), expanded
  left to right, several brackets as a cross product (``r[1-2]n[1-2]`` -> ``r1n1 r1n2
  r2n1 r2n2``);
* a range keeps the width of its zero-padded start (``[08-10]`` -> ``08 09 10``);
* an item in double quotes is one literal name (``"gpu,a[1]"`` -> ``gpu,a[1]``; a quote
  inside is doubled, ``""``). Slurm's own names never hold ``,[]"#`` or blanks; the
  quotes let a fabric whose hosts were named by another tool (a netlist) be written as a
  Slurm file and read back with the same hosts.

Names hold printable characters only (a NUL or another control character is refused).
:func:`count_hostlist` counts an expression's names without expanding it, so that a
range such as ``[1-10000000]`` is refused, or its memory estimated, before a list of
ten million names exists.

Written here rather than taken from python-hostlist: that package is GPL-licensed (a
dependency would change what fabricflow's users may do with it), and the two functions
this module needs are small enough to test fully.
"""

from __future__ import annotations

import re

__all__ = ["HostlistError", "compress_hostlist", "count_hostlist", "expand_hostlist"]

MAX_HOSTS = 10_000_000  # names one expression may expand to (a typo like [1-99999999999])

_NAME = re.compile(r"^(.*?)(\d+)$")
QUOTED = re.compile(r'"(?:[^"]|"")*"')  # one quoted name, a quote inside doubled
_SPECIAL = frozenset(',[]"#')  # characters a name must be quoted to hold (with blanks)


class HostlistError(ValueError):
    """A malformed hostlist expression; the message says what and where."""


def expand_hostlist(expression: str, limit: int = MAX_HOSTS) -> list[str]:
    """The host names of ``expression``, in order, duplicates kept.

    Raises:
        HostlistError: unbalanced or nested brackets, an empty item or range, a range
            that runs backwards, an unclosed quote, a control character, or more than
            ``limit`` names (counted before any name is made).
    """
    count = count_hostlist(expression)
    if count > limit:
        raise HostlistError(
            f"{_short(expression)} expands to {count:,} names, more than the limit of {limit:,}"
        )
    names: list[str] = []
    for item in _split_top(expression):
        names.extend(_expand_item(item, expression))
    return names


def count_hostlist(expression: str) -> int:
    """How many names ``expression`` expands to, without making them (the syntax is
    checked as :func:`expand_hostlist` checks it).

    Raises:
        HostlistError: as :func:`expand_hostlist` (except the size limit).
    """
    total = 0
    for item in _split_top(expression):
        if not item:
            raise HostlistError(f"an empty item in {_short(expression)}")
        if item.startswith('"'):
            total += 1
            continue
        product = 1
        for index, part in enumerate(re.split(r"\[([^\]]*)\]", item)):
            if index % 2 == 0:
                _check_text(part, item, expression)
            else:
                product *= sum(_piece_count(piece, part, expression) for piece in part.split(","))
        total += product
    return total


def _short(expression: str) -> str:
    """``expression`` for a message (long ones cut in the middle)."""
    return (
        repr(expression)
        if len(expression) <= 80
        else repr(expression[:40] + "..." + expression[-30:])
    )


def _check_text(part: str, item: str, expression: str) -> None:
    if any(c in part for c in " \t"):
        raise HostlistError(f"a blank inside the name {item!r} in {_short(expression)}")
    if '"' in part:
        raise HostlistError(
            f'a quote inside the name {item!r} in {_short(expression)}: quote whole names ("a,b")'
        )
    bad = next((c for c in part if not c.isprintable()), None)
    if bad is not None:
        raise HostlistError(
            f"the control character {bad!r} in the name {item!r} in {_short(expression)}"
        )


def _split_top(expression: str) -> list[str]:
    """The top-level items of ``expression`` (commas inside brackets or quotes belong to
    them); a quoted item is returned with its quotes."""
    items: list[str] = []
    position = 0
    while True:
        while position < len(expression) and expression[position] in " \t":
            position += 1
        if expression.startswith('"', position):
            match = QUOTED.match(expression, position)
            if match is None:
                raise HostlistError(f"a '\"' without its closing quote in {_short(expression)}")
            position = match.end()
            while position < len(expression) and expression[position] in " \t":
                position += 1
            if position < len(expression) and expression[position] != ",":
                raise HostlistError(
                    f"{match.group()} is followed by {expression[position:][:20]!r} in "
                    f"{_short(expression)}: a quoted name is a whole item"
                )
            items.append(match.group())
        else:
            depth = 0
            start = position
            while position < len(expression):
                char = expression[position]
                if char == "[":
                    depth += 1
                    if depth > 1:
                        raise HostlistError(f"nested '[' in {_short(expression)}")
                elif char == "]":
                    depth -= 1
                    if depth < 0:
                        raise HostlistError(f"a ']' without '[' in {_short(expression)}")
                elif char == "," and depth == 0:
                    break
                position += 1
            if depth:
                raise HostlistError(f"a '[' without ']' in {_short(expression)}")
            items.append(expression[start:position].strip())
        if position >= len(expression):
            return items
        position += 1  # the comma


def _expand_item(item: str, expression: str) -> list[str]:
    if item.startswith('"'):
        name = item[1:-1].replace('""', '"')
        if not name:
            raise HostlistError(f"an empty quoted name in {_short(expression)}")
        if not name.isprintable():
            raise HostlistError(f"a control character in the name {item!r} in {_short(expression)}")
        return [name]
    parts = re.split(r"\[([^\]]*)\]", item)  # text, bracket, text, bracket, ..., text
    names = [""]
    for index, part in enumerate(parts):
        if index % 2 == 0:
            names = [name + part for name in names]
            continue
        values = _bracket(part, expression)
        names = [name + value for name in names for value in values]
    return names


def _piece_count(piece: str, body: str, expression: str) -> int:
    """Names of one ``N`` or ``N-M`` piece of the bracket ``[body]``, checked."""
    piece = piece.strip()
    low, dash, high = piece.partition("-")
    if not low.isdigit() or not low.isascii() or (dash and not (high.isdigit() and high.isascii())):
        raise HostlistError(f"[{body}] in {_short(expression)}: {piece!r} is not N or N-M")
    if not dash:
        return 1
    first, last = int(low), int(high)
    if last < first:
        raise HostlistError(f"[{body}] in {_short(expression)}: the range {piece!r} runs backwards")
    return last - first + 1


def _bracket(body: str, expression: str) -> list[str]:
    values: list[str] = []
    for piece in body.split(","):
        _piece_count(piece, body, expression)  # checked (and counted) before expanding
        low, dash, high = piece.strip().partition("-")
        if not dash:
            values.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        values.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return values


def compress_hostlist(names: list[str]) -> str:
    """A hostlist expression of ``names``, their order kept: neighbours that share a
    prefix and count up by one become one range, ranges of one prefix one bracket
    (``node[001-004,007]``); a name holding ``,[]"#`` or a blank is written quoted
    (``"gpu,a"``). ``expand_hostlist(compress_hostlist(x)) == x`` for any names of
    printable characters.

    Raises:
        HostlistError: an empty name or one with a control character.
    """
    items: list[tuple[str, str, str]] = []  # (prefix, first digits, last digits)
    for name in names:
        if not name or not name.isprintable():
            raise HostlistError(f"cannot write the host name {name!r} in a hostlist")
        if _SPECIAL.intersection(name) or any(c.isspace() for c in name):
            items.append(('"' + name.replace('"', '""') + '"', "", ""))
            continue
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
