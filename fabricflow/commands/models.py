"""``fabricflow models``: list the shipped model presets with their key facts."""

from __future__ import annotations

from fabricflow.commands.common import add_json_flag, print_json, print_table
from fabricflow.workload.model_spec import list_models, load_model


def register(parser) -> None:
    parser.description = (
        "List the model presets that --model takes: parameters (total, and "
        "active per token for mixture-of-experts models), layers, hidden size, attention "
        "heads (query / key-value), experts and vocabulary."
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def model_facts(model) -> dict:
    """Key facts of a :class:`ModelSpec`: ``parameters`` and ``active_parameters`` (per
    token: the dense layers, and of each MoE layer its shared and routed-to experts),
    ``layers``, ``hidden_size``, ``heads``, ``kv_heads``, ``experts``, ``experts_per_token``,
    ``vocab_size``, ``attention``."""
    total = model.num_parameters()
    active = total
    if model.is_moe:
        experts = model.layer_parameters(True)["experts"]
        idle = experts * (1 - model.experts_per_token / model.num_experts)
        active = total - model.num_moe_layers * idle
    return {
        "name": model.name,
        "type": model.model_type,
        "parameters": total,
        "active_parameters": active,
        "layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "heads": model.num_heads,
        "kv_heads": model.num_kv_heads,
        "experts": model.num_experts,
        "experts_per_token": model.experts_per_token,
        "vocab_size": model.vocab_size,
        "attention": model.attention,
    }


def run(args) -> int:
    rows = [model_facts(load_model(name)) for name in list_models()]
    if args.json:
        print_json({"models": rows})
        return 0
    print_table(
        [
            {
                "model": row["name"],
                "params": f"{row['parameters'] / 1e9:.1f}B",
                "active": f"{row['active_parameters'] / 1e9:.1f}B",
                "layers": row["layers"],
                "hidden": row["hidden_size"],
                "heads": f"{row['heads']}/{row['kv_heads']}",
                "experts": f"{row['experts']} top{row['experts_per_token']}"
                if row["experts"]
                else "-",
                "vocab": f"{row['vocab_size']:,}",
            }
            for row in rows
        ],
        [
            ("model", "model"),
            ("params", "params"),
            ("active", "active"),
            ("layers", "layers"),
            ("hidden", "hidden"),
            ("heads", "heads q/kv"),
            ("experts", "experts"),
            ("vocab", "vocab"),
        ],
        names=1,
    )
    return 0
