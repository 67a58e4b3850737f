"""One safe reader for every YAML or JSON file a user passes (fabric specs, model configs).

:func:`read_structured` reads a file into plain Python data (dicts, lists, strings,
numbers) and refuses, with a :class:`~fabricflow.errors.SpecError` that names the file
and, where there is one, the field, what would otherwise crash later or silently mean
something else:

- files over :data:`MAX_FILE_BYTES` (checked before reading);
- text that is not UTF-8 (a UTF-8 byte-order mark is accepted, and so is UTF-16 or
  UTF-32 with a byte-order mark, which is decoded);
- nesting deeper than :data:`MAX_DEPTH` (Python's parsers recurse: deeper would end in
  ``RecursionError``);
- YAML aliases used more than :data:`MAX_ALIASES` times, or whose expansion holds more
  than :data:`MAX_NODES` values ("billion laughs": a few lines expanding to 10**9 values);
- duplicate keys in a mapping (both parsers keep the last one silently), with the line;
- integers outside the int64 range (numpy would raise ``OverflowError`` on them later),
  and JSON's non-standard ``NaN`` / ``Infinity``.

Numbers in YAML are read as decimal only, unlike YAML 1.1 (PyYAML's default):

- base-60 ("sexagesimal") values such as ``3:1`` or ``1:00`` stay strings (YAML 1.1 reads
  them as 181 and 60), so ``oversubscription: 3:1`` means the ratio it reads as;
- integers in hex (``0x10``), octal (``0o10``, ``010``), binary (``0b10``) or with
  underscores (``1_000``, ``1_000.5``) are refused with an error naming the field (YAML 1.1
  reads some of them, ``0x10`` = 16, ``010`` = 8, ``1_000`` = 1000, and leaves others, such
  as ``0o10``, strings); write the decimal number, or quote it where text is meant.

Example::

    spec = read_structured("my-fabric.yaml", what="fabric")
"""

from __future__ import annotations

import codecs
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from fabricflow.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20
MAX_DEPTH = 64
MAX_ALIASES = 1000
MAX_NODES = 1_000_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def read_structured(path: str | os.PathLike, *, what: str, syntax: str | None = None) -> Any:
    """The parsed content of a YAML or JSON file, checked as the module docstring says.

    Args:
        path: the file.
        what: the field or flag the file was given for (``"fabric"``, ``"model"``); it
            names file-level errors.
        syntax: ``"yaml"`` or ``"json"``; default by suffix (``.json`` is JSON, anything
            else YAML, a superset of JSON).

    Returns:
        Plain data: dict / list / str / int / float / bool / None.

    Raises:
        SpecError: the file is missing, too large, not text, not valid YAML/JSON, or
            breaks one of the limits; the message names the file (and field or line).
    """
    path = Path(path)
    if syntax is None:
        syntax = "json" if path.suffix.lower() == ".json" else "yaml"
    if syntax not in ("yaml", "json"):
        raise SpecError("syntax", f"must be 'yaml' or 'json', got {syntax!r}")
    text = _read_text(path, what)
    return parse_structured(text, what=what, source=str(path), syntax=syntax)


def is_file(path: str | os.PathLike, what: str) -> bool:
    """``Path(path).is_file()``, but a path the system cannot even look up (a name too
    long, ENAMETOOLONG; a permission error on a folder) is a :class:`SpecError` naming
    ``what``, not a raw ``OSError`` (``Path.is_file`` only hides "not found")."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        text = str(path)
        shown = text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"
        reason = getattr(error, "strerror", None) or str(error)
        raise SpecError(what, f"cannot use {shown!r} as a file path: {reason}") from None


def parse_structured(text: str, *, what: str, source: str, syntax: str = "yaml") -> Any:
    """Parse YAML or JSON ``text`` with the checks of :func:`read_structured`.

    ``source`` names the text in errors (a path, or ``"<preset x>"``).
    """
    if syntax == "json":
        data = _parse_json(text, what, source)
    else:
        data = _parse_yaml(text, what, source)
    check_plain_data(data, source)
    return data


def _read_text(path: Path, what: str) -> str:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise SpecError(what, f"{path} is not a file")
        if size > MAX_FILE_BYTES:
            raise SpecError(
                what,
                f"{path} is {size / 2**20:.1f} MiB, over the limit of "
                f"{MAX_FILE_BYTES // 2**20} MiB for a spec or config file",
            )
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(what, f"file not found: {path}") from None
    except OSError as error:
        raise SpecError(what, f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:  # grew while we read it, or a special file
        raise SpecError(
            what,
            f"{path} is over the limit of {MAX_FILE_BYTES // 2**20} MiB for a spec or config file",
        )
    return decode_text(raw, what, str(path))


def decode_text(raw: bytes, what: str, source: str) -> str:
    """UTF-8 (with or without BOM), or UTF-16/32 with a BOM; anything else is refused."""
    encoding = next((name for bom, name in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise SpecError(
            what,
            f"{source} is not {encoding.upper()} text: byte "
            f"0x{raw[error.start]:02x} at line {line}, column {column} "
            "(save the file as UTF-8)",
        ) from None


# ---------------------------------------------------------------------------- JSON


def _parse_json(text: str, what: str, source: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict:
        seen: dict = {}
        for key, value in items:
            if key in seen:
                raise SpecError(
                    what,
                    f"{source}: duplicate key {key!r} in a JSON object; each key may appear once",
                )
            seen[key] = value
        return seen

    def constant(name: str) -> float:
        raise SpecError(what, f"{source}: {name} is not a JSON number; write a finite number")

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except SpecError:
        raise
    except json.JSONDecodeError as error:
        raise SpecError(what, f"{source} is not valid JSON: {error}") from None
    except RecursionError:
        raise SpecError(what, f"{source} is nested too deeply (limit {MAX_DEPTH} levels)") from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise _value_error(error, what, source) from None


def _value_error(error: ValueError, what: str, source: str) -> SpecError:
    if "integer string conversion" in str(error):
        return SpecError(
            what,
            f"{source} holds an integer of more than 4300 digits, outside the 64-bit integer range",
        )
    return SpecError(what, f"{source}: {error}")


# ---------------------------------------------------------------------------- YAML


def _parse_yaml(text: str, what: str, source: str) -> Any:
    import yaml

    loader = _loader_class()(text)
    loader.what, loader.source = what, source
    try:
        return loader.get_single_data()
    except SpecError:
        raise
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):  # libyaml's own limit (1000 levels)
            raise SpecError(what, f"{source} is nested deeper than {MAX_DEPTH} levels") from None
        raise SpecError(what, f"{source} is not valid YAML: {error}") from None
    except RecursionError:
        raise SpecError(what, f"{source} is nested too deeply (limit {MAX_DEPTH} levels)") from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise _value_error(error, what, source) from None
    finally:
        loader.dispose()


_LOADER = None


def _loader_class():
    """A SafeLoader that limits depth and aliases and refuses duplicate keys (built once,
    on first use, so that importing this module does not import yaml)."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.events import AliasEvent
    from yaml.nodes import MappingNode, ScalarNode
    from yaml.resolver import Resolver

    # libyaml's event parser where present (several times faster on large graph specs);
    # the composer stays in Python, where the depth and alias limits live.
    try:
        from yaml.cyaml import CParser as EventParser
    except ImportError:  # PyYAML without libyaml: the pure-Python reader, scanner, parser
        from yaml.parser import Parser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class EventParser(Reader, Scanner, Parser):  # type: ignore[no-redef]
            def __init__(self, stream):
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                Parser.__init__(self)

    class DecimalResolver(Resolver):
        """YAML 1.1's implicit types, except that numbers are decimal only (module docstring)."""

    DecimalResolver.yaml_implicit_resolvers = {
        first: [(tag, regex) for tag, regex in resolvers if tag not in (_INT, _FLOAT)]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }
    for tag, regex, first in _NUMBER_RESOLVERS:
        DecimalResolver.add_implicit_resolver(tag, regex, list(first))

    class Loader(Composer, EventParser, SafeConstructor, DecimalResolver):
        what = "file"
        source = "<text>"

        def __init__(self, stream):
            EventParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            DecimalResolver.__init__(self)
            self._depth = 0
            self._aliases = 0

        def _where(self, mark) -> str:
            return f"{self.source}, line {mark.line + 1}"

        def compose_node(self, parent, index):
            if self.check_event(AliasEvent):
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise SpecError(
                        self.what,
                        f"{self._where(self.peek_event().start_mark)}: "
                        f"more than {MAX_ALIASES} YAML aliases (*name)",
                    )
                return super().compose_node(parent, index)
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise SpecError(
                        self.what,
                        f"{self._where(self.peek_event().start_mark)}: "
                        f"nested deeper than {MAX_DEPTH} levels",
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def compose_document(self):
            node = super().compose_document()
            if self._aliases:
                _check_expansion(node, self.what, self.source)
            return node

        def construct_mapping(self, node, deep=False):
            if isinstance(node, MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, ScalarNode) or key_node.tag.endswith(":merge"):
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node.start_mark)
                    except TypeError:
                        continue  # unhashable: the constructor reports it
                    if first is not key_node.start_mark:
                        raise SpecError(
                            self.what,
                            f"{self._where(key_node.start_mark)}: "
                            f"duplicate key {key!r} (first at line "
                            f"{first.line + 1}); each key may appear once",
                        )
            return super().construct_mapping(node, deep=deep)

    Loader.add_constructor(_NOT_DECIMAL, lambda loader, node: NotDecimal(node.value))
    _LOADER = Loader
    return Loader


_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NOT_DECIMAL = "tag:fabricflow,2026:not-decimal"
_NUMBER_RESOLVERS = (
    (_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), "-+0123456789"),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.[0-9]+(?:[eE][-+][0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+0123456789.",
    ),
    # what YAML 1.1 would read as a number, or nearly: hex, octal, binary, leading zeros,
    # underscores; refused by check_plain_data, which names the field
    (
        _NOT_DECIMAL,
        re.compile(
            r"^[-+]?(?:0[xX][0-9a-fA-F_]+|0[oObB][0-9_]+|0[0-9_]+(?:\.[0-9_]*)?"
            r"|[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?|[0-9]*\.[0-9_]*_[0-9_]*)"
            r"(?:[eE][-+]?[0-9]+)?$"
        ),
        "-+0123456789.",
    ),
)


class NotDecimal(str):
    """A YAML scalar that YAML 1.1 reads as a non-decimal number (``0x10``, ``010``,
    ``1_000``); kept as its text until :func:`check_plain_data` refuses it by field."""


def _check_expansion(root, what: str, source: str) -> None:
    """Refuse a composed YAML graph whose aliases expand to more than MAX_NODES values or
    deeper than MAX_DEPTH, or that refers to itself. Linear in the distinct nodes."""
    from yaml.nodes import MappingNode, SequenceNode

    def children(node):
        if isinstance(node, MappingNode):
            return [item for pair in node.value for item in pair]
        if isinstance(node, SequenceNode):
            return list(node.value)
        return []

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > MAX_NODES or depth[key] > MAX_DEPTH:
                limit = (
                    f"{MAX_NODES:,} values"
                    if size[key] > MAX_NODES
                    else f"{MAX_DEPTH} levels of nesting"
                )
                raise SpecError(
                    what,
                    f"{source}, line {node.start_mark.line + 1}: YAML "
                    f"aliases expand this to more than {limit}",
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise SpecError(
                what,
                f"{source}, line {node.start_mark.line + 1}: a YAML alias "
                "refers to a node that contains it (a recursive structure)",
            )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in children(node) if id(kid) not in size)


# ---------------------------------------------------------------------------- values


def check_plain_data(data: Any, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH and integers outside int64 anywhere in
    ``data``, naming the field. Iterative: it needs no recursion however deep the data."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, field, depth = stack.pop()
        if isinstance(value, (dict, list)) and depth > MAX_DEPTH:
            raise SpecError(field, f"{source} is nested deeper than {MAX_DEPTH} levels here")
        if isinstance(value, dict):
            stack.extend(
                (item, f"{field}.{key}" if field else str(key), depth + 1)
                for key, item in value.items()
            )
        elif isinstance(value, list):
            stack.extend((item, f"{field}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, NotDecimal):
            raise SpecError(
                field,
                f"{str(value)!r} in {source}: numbers are read in decimal only, without "
                "underscores (hex 0x, octal 0o or a leading 0, binary 0b and 1_000 are "
                "refused); write the decimal value, or quote it if it is text",
            )
        elif isinstance(value, int) and not isinstance(value, bool):
            if not INT64_MIN <= value <= INT64_MAX:
                shown = (
                    str(value)
                    if value.bit_length() < 128
                    else f"an integer of {value.bit_length()} bits"
                )
                raise SpecError(
                    field,
                    f"{shown} in {source} is outside the 64-bit integer "
                    f"range ({INT64_MIN}..{INT64_MAX})",
                )


def to_jsonable(value, *, infinity_as_text: bool = True):
    """Convert numpy scalars/arrays (recursively) into plain Python for json.dumps.

    NaN becomes ``None``; an infinity becomes ``"inf"``/``"-inf"``, or ``None`` with
    ``infinity_as_text=False`` (the study scripts' key numbers). Numpy scalars are
    converted first, so a ``np.float64`` NaN is caught as a Python one is.
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, infinity_as_text=infinity_as_text) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, infinity_as_text=infinity_as_text) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist(), infinity_as_text=infinity_as_text)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        if np.isnan(value) or not infinity_as_text:
            return None
        return "inf" if value > 0 else "-inf"
    return value
