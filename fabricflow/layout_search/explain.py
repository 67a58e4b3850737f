"""One line on why the winner of a layout search wins: what the runner-up loses, and where
on the fabric (the link kinds that bound the runner-up's slowest collective)."""

from __future__ import annotations

from fabricflow.collective.comm import prepared_collective
from fabricflow.layout_search.layout_codes import candidate_of, describe, differences
from fabricflow.workload.gpu_memory import stage_parameters
from fabricflow.workload.placement import place
from fabricflow.workload.step import BREAKDOWN_KEYS

COMM_PARTS = ("tp", "cp", "ep", "pp", "dp")


# Step times within this fraction of each other tie: the model's own differences there
# (e.g. ZeRO-1 against ZeRO-2 when the optimizer state is not the bottleneck) are noise.
TIE_RTOL = 1e-4


def label(kwargs: dict) -> str:
    """The complete one-line label of a search's ``kwargs`` (:func:`.layout_codes.describe`)."""
    return describe(candidate_of(kwargs))


def bottleneck(fabric, model, kwargs: dict, part: str) -> str:
    """Link kinds that bound the slowest group of ``part``'s main collective (or '')."""
    lay = kwargs["layout"]
    where = place(
        lay, fabric.num_gpus, order=kwargs["order"], placement=kwargs["placement"],
        seed=kwargs.get("placement_seed", 0), gpus_per_node=fabric.gpus_per_node,
    )  # fmt: skip
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    activation = 2.0 * tokens * model.hidden_size
    if part == "tp":
        op, groups, size = "all_reduce", where.groups("tp"), activation
    elif part == "cp":
        op, groups, size = "sendrecv", where.groups("cp"), activation / lay.tp
    elif part == "pp":
        op, groups, size = "sendrecv", where.groups("pp"), activation / lay.tp
    elif part == "ep":
        op, groups, size = "all_to_all", where.groups("ep", expert=True), activation / lay.tp
    else:
        dense, _ = stage_parameters(model, lay)
        grad = 4.0 if lay.grad_reduce_dtype == "fp32" else 2.0
        op = "all_reduce" if lay.zero == 0 else "reduce_scatter"
        groups, size = where.groups(("dp", "cp")), grad * dense
    if groups.shape[1] < 2:
        return ""
    algorithm = kwargs.get("algorithms", {}).get(part, "auto")
    solved = prepared_collective(fabric, op, groups, algorithm=algorithm)
    result = solved.prepared.evaluate([float(size)])[0]
    kinds = sorted(set(result.bottleneck_kinds))
    return "/".join(kinds)


def why_best(search, fabric=None, model=None) -> str:
    """The sentence; ``fabric`` and ``model`` (kept by the search) locate the bottleneck."""
    fabric = fabric if fabric is not None else getattr(search, "fabric", None)
    model = model if model is not None else getattr(search, "model", None)
    if len(search.top) < 2:
        return "the only feasible candidate timed"
    best_kw, best = search.top[0]
    # The runner-up worth explaining: the best candidate of another layout or order that
    # is really slower; those within TIE_RTOL of the winner tie with it.
    ties, runner_kw, runner = [], None, None
    for kwargs, result in search.top[1:]:
        if kwargs["layout"] == best_kw["layout"] and kwargs["order"] == best_kw["order"]:
            continue
        if result.step_time_s - best.step_time_s <= TIE_RTOL * best.step_time_s:
            ties.append(kwargs)
            continue
        runner_kw, runner = kwargs, result
        break
    tie_text = ""
    if ties:
        changes = "; ".join(
            ", ".join(differences(candidate_of(best_kw), candidate_of(k))) for k in ties[:3]
        )
        tie_text = (
            f"{len(ties)} other layout(s) tie with the winner within "
            f"{100 * TIE_RTOL:g}% ({changes}{'; ...' if len(ties) > 3 else ''})"
        )
    if runner_kw is None or runner is None:
        return tie_text or "the top candidates are variants of the winner's layout"
    gap = runner.step_time_s - best.step_time_s
    losses = {k: runner.breakdown.get(k, 0.0) - best.breakdown.get(k, 0.0) for k in BREAKDOWN_KEYS}
    part = max(losses, key=lambda k: losses[k])
    text = (
        f"runner-up {label(runner_kw)} is {gap:.3g} s slower "
        f"({100 * gap / best.step_time_s:.2f}%); it loses most in {part} "
        f"(+{losses[part]:.3g} s)"
    )
    if part in COMM_PARTS and fabric is not None and model is not None and losses[part] > 0:
        try:
            kinds = bottleneck(fabric, model, runner_kw, part)
        except Exception as error:  # explanation only: never fail the search for it
            kinds = f"? ({type(error).__name__})"
        if kinds:
            text += f", bound by {kinds} links"
    return f"{tie_text}; {text}" if tie_text else text
