"""CLI subcommands, one module each; see :mod:`fabricflow.cli`.

A module here provides ``register(subparsers)`` which adds a parser and sets its
``func(args) -> int``. Helpers shared by commands live in ``_common.py``.
"""
