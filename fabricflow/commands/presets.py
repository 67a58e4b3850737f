"""``fabricflow presets``: list the shipped fabric presets, one line each."""

from __future__ import annotations

from fabricflow.commands.common import add_json_flag, print_json
from fabricflow.fabric.spec import list_presets


def register(parser) -> None:
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    presets = list_presets()
    if args.json:
        print_json({"presets": presets})
        return 0
    width = max(len(p["name"]) for p in presets)
    for preset in presets:
        print(f"{preset['name']:<{width}}  {preset['gpus']:>7} GPUs  {preset['description']}")
    return 0
