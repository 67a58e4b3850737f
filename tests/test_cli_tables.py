"""The CLI's tables of commands and bench sections: they name every module, and only the
modules of what runs are imported."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
import types

import fabricflow.bench
import fabricflow.commands
from fabricflow.bench import SECTIONS
from fabricflow.cli import _subparsers, build_parser, main
from fabricflow.commands import COMMANDS, HELPERS, module_name


def _modules(package) -> set[str]:
    return {info.name for info in pkgutil.iter_modules(package.__path__)}


def test_the_command_table_names_every_command_module():
    public = {name for name in _modules(fabricflow.commands) if not name.startswith("_")}
    commands = {name.replace("-", "_") for name in COMMANDS}
    assert commands | set(HELPERS) == public and not commands & set(HELPERS)
    assert list(COMMANDS) == sorted(COMMANDS)  # --help lists them in this order


def test_every_command_registers_its_flags_on_the_parser_the_table_named():
    parser = build_parser(*COMMANDS)
    for name, command in _subparsers(parser).items():
        assert command.prog == f"fabricflow {name}"
        assert command.get_default("func") is not None, name
        assert any(action.dest == "json" for action in command._actions), name


def test_the_help_lists_every_command_with_its_summary_and_imports_none():
    code = (
        "import sys\nfrom fabricflow.cli import build_parser\n"
        "text = build_parser().format_help()\n"
        "print(repr(text))\n"
        "print(sorted(m for m in sys.modules if m.startswith('fabricflow.commands.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    text = " ".join(ast.literal_eval(out[0]).split())
    for name, summary in COMMANDS.items():
        assert f"{name} {' '.join(summary.split())}" in text, name
    assert ast.literal_eval(out[1]) == ["fabricflow.commands.interrupts"]


def test_a_command_imports_its_own_module_only():
    code = (
        "import contextlib, io, json, sys\nfrom fabricflow.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(['presets', '--json'])\n"
        "loaded = [m for m in sys.modules if m.startswith('fabricflow.commands.')]\n"
        "from fabricflow.commands import HELPERS\n"
        "print(json.dumps([code, sorted(m for m in loaded if m.split('.')[-1] not in HELPERS)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [0, [module_name("presets")]]


def test_the_section_table_names_every_bench_module():
    public = {name for name in _modules(fabricflow.bench) if not name.startswith("_")}
    assert {name.replace("-", "_") for name in SECTIONS} == public
    assert not hasattr(fabricflow.bench, "ALIASES")  # no former section names kept
    for name in SECTIONS:
        assert callable(fabricflow.bench.load(name).run), name


def test_bench_imports_only_the_sections_it_runs(monkeypatch, capsys):
    loaded = []

    def load(name):
        loaded.append(name)
        return types.SimpleNamespace(run=lambda options: {"figure": 1.0})

    monkeypatch.setattr("fabricflow.commands.bench.load", load)
    assert main(["bench", "fabric", "cc", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert loaded == ["fabric", "cc"]
    assert report["fabric"]["figure"] == 1.0 and report["cc"]["figure"] == 1.0
