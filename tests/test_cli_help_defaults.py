"""``--help`` shows every option's default, and the fct fidelity default is explained
where it differs from the Python one."""

from __future__ import annotations

import argparse

from fabricflow.cli import DefaultsHelpFormatter, _subparsers, build_parser
from fabricflow.commands import COMMANDS


def test_every_option_with_a_default_shows_it_in_help():
    parser = build_parser(*COMMANDS)
    for name, command in _subparsers(parser).items():
        text = command.format_help()
        for action in command._actions:
            if not DefaultsHelpFormatter._shows_default(action):
                continue
            flag = action.option_strings[0]
            start = text.index(flag, text.index("options:"))
            following = " ".join(text[start:].split("\n  -")[0].split())
            assert "default" in following, (name, flag, following)


def test_switches_and_unset_options_show_no_noise():
    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--flag", action="store_true", help="a switch")
    parser.add_argument("--out", default=None, help="folder")
    parser.add_argument("--k", type=int, default=8)
    text = parser.format_help()
    assert "(default: False)" not in text and "(default: None)" not in text
    assert "default: 8" in text


def test_fct_fidelity_default_is_explained_on_both_sides():
    import fabricflow.dynamics.flow_completion as fct

    command = _subparsers(build_parser("fct"))["fct"]
    text = " ".join(command.format_help().split())
    assert "(default: packet)" in text and "ff.flow_completion_times" in text
    assert "fabricflow fct" in fct.flow_completion_times.__doc__
