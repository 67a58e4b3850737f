"""The repository stands alone: documentation links stay inside it, every citation of
``docs/references.md §N`` names an existing section, and ``fabricflow.typing`` is light.
"""

from __future__ import annotations

import pathlib
import re
import typing

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Text a user or contributor reads: code, tests, scripts, notebooks, presets, docs.
SOURCE_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".ipynb", ".toml", ".txt"}
SOURCE_ROOTS = [
    "fabricflow",
    "studies",
    "tests",
    "notebooks",
    "docs",
    "README.md",
    "pyproject.toml",
]

# Inline links and images [text](target), and reference definitions [label]: target.
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_CITATION = re.compile(r"docs/references\.md\s*§\s*(\d+)((?:\s*(?:,|-|and)\s*§?\s*\d+)*)")


def _source_files():
    for name in SOURCE_ROOTS:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for file in files:
            if (
                file.is_file()
                and file.suffix in SOURCE_SUFFIXES
                and "__pycache__" not in file.parts
            ):
                yield file


def _without_code_blocks(text: str) -> str:
    """Markdown text with fenced code blocks blanked (links there are not links)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(markdown: pathlib.Path) -> set[str]:
    text = _without_code_blocks(markdown.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.MULTILINE)}


def _reference_sections() -> dict[int, str]:
    text = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    return {
        int(m.group(1)): m.group(2) for m in re.finditer(r"^## (\d+)\. (.+)$", text, re.MULTILINE)
    }


@pytest.mark.parametrize("markdown", MARKDOWN, ids=lambda p: p.name)
def test_markdown_links_stay_inside_the_repository(markdown):
    text = _without_code_blocks(markdown.read_text(encoding="utf-8"))
    targets = _INLINE_LINK.findall(text) + _REFERENCE_DEF.findall(text)
    for target in targets:
        assert not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target), (
            f"{markdown.name}: link leaves the repository: {target}"
        )
        assert not target.startswith(("/", "\\", "~")), f"{markdown.name}: absolute link {target}"
        path, _, anchor = target.partition("#")
        resolved = (markdown.parent / path).resolve() if path else markdown
        assert resolved.is_relative_to(ROOT), f"{markdown.name}: link outside the repo {target}"
        assert resolved.exists(), f"{markdown.name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{markdown.name}: no heading #{anchor}"
    # A bare URL is rendered as a link too: sources are cited as text instead.
    bare = re.findall(r"(?:https?|ftp)://\S+|\bwww\.\S+", text)
    assert not bare, f"{markdown.name}: web address(es) {bare}"


def test_the_link_checker_catches_bad_links(tmp_path):
    # The patterns above must see the forms a bad link takes.
    text = (
        '[a](https://example.org/x) [b](../shared/NOTES.md) ![c](<img.png> "t")\n'
        "[d]: http://example.org\n"
    )
    found = _INLINE_LINK.findall(text) + _REFERENCE_DEF.findall(text)
    assert found == ["https://example.org/x", "../shared/NOTES.md", "img.png", "http://example.org"]
    assert (
        _anchor("## 4. Collectives: nccl-tests conventions".lstrip("# "))
        == "4-collectives-nccl-tests-conventions"
    )


def test_nothing_points_at_notes_outside_the_repository():
    this_file = pathlib.Path(__file__).resolve()
    pattern = re.compile(r"\.\./shared|REFERENCES(?:\.md|\s*§|\s+\d)|DESIGN\.md|STYLE\.md")
    offenders = []
    for file in _source_files():
        if file.resolve() == this_file:
            continue
        for number, line in enumerate(
            file.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        ):
            if pattern.search(line):
                offenders.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "cite docs/ instead:\n" + "\n".join(offenders)


def test_reference_sections_are_numbered_in_order():
    numbers = list(_reference_sections())
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    assert len(numbers) >= 6


def test_every_citation_names_an_existing_section():
    sections = _reference_sections()
    cited = {}
    for file in _source_files():
        text = file.read_text(encoding="utf-8", errors="replace")
        for match in _CITATION.finditer(text):
            numbers = [int(match.group(1)), *map(int, re.findall(r"\d+", match.group(2)))]
            for number in numbers:
                cited.setdefault(number, []).append(str(file.relative_to(ROOT)))
    assert cited, "no citation of docs/references.md found"
    missing = {n: files for n, files in cited.items() if n not in sections}
    assert not missing, f"citations of sections that do not exist: {missing}"
    # The sections the code leans on most are cited.
    assert {1, 2, 4, 5, 6} <= set(cited)


def test_typing_aliases_carry_a_dtype_and_a_known_shape():
    import numpy as np

    from fabricflow import typing as fft

    axes = {
        "flows",
        "hops",
        "links",
        "nodes",
        "gpus",
        "scenarios",
        "paths",
        "num_groups",
        "group_size",
        "records",
    }
    assert len(fft.__all__) >= 15
    for name in fft.__all__:
        alias = getattr(fft, name)
        array_type, shape = typing.get_args(alias)
        if name.endswith("Like"):  # inputs: anything numpy converts (numpy's ArrayLike)
            assert array_type == np.typing.ArrayLike, name
        else:
            assert typing.get_origin(array_type) is np.ndarray, name
        assert isinstance(shape, str) and set(shape.split()) <= axes, (name, shape)
    assert typing.get_args(fft.LinkIds)[1] == "flows hops"
    assert typing.get_args(typing.get_args(fft.LinkIds)[0])[1] == np.dtype[np.int32]
    assert typing.get_args(fft.CapacityBatch)[1] == "scenarios links"
    assert typing.get_args(fft.Groups)[1] == "num_groups group_size"


def test_bench_commands_in_the_docs_parse_and_name_real_sections():
    # docs/cluster.md said `fabricflow bench --section cluster`, which bench does not take.
    import re
    import shlex
    from pathlib import Path

    from fabricflow.bench import SECTIONS
    from fabricflow.cli import build_parser

    root = Path(__file__).resolve().parent.parent
    known = set(SECTIONS)
    parser = build_parser("bench")
    found = 0
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for command in re.findall(r"`(?:[A-Z_]+=\S+ )?fabricflow (bench[^`]*)`", page.read_text()):
            words = [w for w in shlex.split(command) if not w.startswith("[")]
            if any(not re.fullmatch(r"[\w-]+", w) for w in words):
                continue  # a usage line with placeholders, not a command
            found += 1
            args = parser.parse_args(words)  # SystemExit on an unknown flag
            assert set(args.sections) <= known, (page.name, command)
    assert found >= 5
