"""Fabric designs for a training workload: the design space, the Clos spec of one design,
and its evaluation (layouts from the layout optimizer, cost from the price table).

A design is a point of these knobs (its code joins the values with ``/``, e.g.
``3t/7:1/rail/1p/400G/su8/ib``):

- ``tiers``: 1 to 4 switch tiers;
- ``oversubscription``: down:up ratio of the uplinks of the tier below the top (the leaf
  of a 2-tier fabric, the spine of a 3-tier one, as Meta's 1:7 above its pods); the
  other tiers are 1:1;
- ``attachment``: ``rail``, ``tor`` or ``rail-only``;
- ``planes``: independent copies of the network, each GPU with one port per plane;
- ``nic_speed``: scale-out bandwidth per GPU (split over the planes);
- ``scale_up``: GPUs per scale-up (NVLink) domain, a multiple of the node;
- ``transport``: ``ib`` (InfiniBand, adaptive routing), ``roce`` (RoCEv2, ECMP) or
  ``uet`` (Ultra Ethernet: per-packet spraying, trimming instead of PFC).

Switch radix follows from the transport and the port speed: InfiniBand Quantum-2 (64 x
400G, 128 x 200G split), Quantum-X800 (144 x 800G); Ethernet 51.2T (128 x 400G, 64 x 800G,
256 x 200G), for RoCEv2 and Ultra Ethernet alike. The fabric is built for the smallest GPU count at or above the workload's
that fills whole leaves and top-tier blocks (the workload uses the first GPUs; the spare
ones' network is paid for). The uplinks into the top tier are bundled so that a partly
used top tier has fewer, fuller switches (same bandwidth: 4 pods under 128-port cores
take bundles of 32, so 128 cores instead of 4,096).
"""

from __future__ import annotations

import itertools
import math

from fabricflow.errors import RoutingError, SpecError
from fabricflow.fabric.cost import fabric_cost, work_cost
from fabricflow.fabric.spec import build_fabric
from fabricflow.layout_search.layout_codes import candidate_of, coded_knobs, encode, metric_names
from fabricflow.layout_search.optimize import optimize_layout
from fabricflow.units import parse_bandwidth
from fabricflow.workload.calibration import Calibration
from fabricflow.workload.step import StepResult

DESIGN_KNOBS = (
    "tiers",
    "oversubscription",
    "attachment",
    "planes",
    "nic_speed",
    "scale_up",
    "transport",
)
DEFAULT_SPACE: dict[str, list] = {
    "tiers": [2, 3],
    "oversubscription": [1, 3, 7],
    "attachment": ["rail", "tor", "rail-only"],
    "planes": [1, 2],
    "nic_speed": ["400Gbps", "800Gbps"],
    "scale_up": [8],
    "transport": ["ib", "roce", "uet"],
}
TRANSPORTS = {
    "ib": {"protocol": "infiniband", "adaptive_routing": True},
    "roce": {"protocol": "rocev2", "adaptive_routing": False},
    "uet": {"protocol": "uet", "adaptive_routing": True},
}
# (transport, port speed in Gb/s) -> switch radix (ports at that speed)
RADIX = {
    ("ib", 200): 128,
    ("ib", 400): 64,
    ("ib", 800): 144,
    ("roce", 100): 512,
    ("roce", 200): 256,
    ("roce", 400): 128,
    ("roce", 800): 64,
    ("uet", 100): 512,
    ("uet", 200): 256,
    ("uet", 400): 128,
    ("uet", 800): 64,
}
# Work of each job's layout search per design (group structures solved plus candidates
# timed; optimize_layout's budget_work): Llama-3-405B on 16,384 H100 searched the default
# space exhaustively in 89 (3-tier 3:1 rail) and 96 (3:1 rail-only) units on InfiniBand
# designs, 335 on the 1:1 rail RoCE-ECMP one (docs/cost.md).
DEFAULT_LAYOUT_BUDGET_WORK = 512
METRICS = (
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "network_capex",
    "network_power_W",
    "network_capex_per_gpu",
    "capex",
    "power_W",
    "cost_per_hour",
    "cost_per_million_tokens",
    "tokens_per_dollar",
    "cost_per_pflops_day",
    "gpus",
    "fabric_gpus",
    "switches",
    "layouts_exhaustive",
)


def design_codes(space: dict | None = None) -> list[str]:
    """Every design of ``space`` (knob -> values; missing knobs take the default space's)."""
    merged = {**DEFAULT_SPACE, **(space or {})}
    unknown = sorted(set(merged) - set(DESIGN_KNOBS))
    if unknown:
        raise SpecError("space", f"unknown knob(s) {unknown}; knobs: {list(DESIGN_KNOBS)}")
    for knob in DESIGN_KNOBS:
        if not isinstance(merged[knob], list | tuple) or not merged[knob]:
            raise SpecError(f"space.{knob}", f"expected a non-empty list, got {merged[knob]!r}")
    return [design_code(dict(zip(DESIGN_KNOBS, values, strict=True)))
            for values in itertools.product(*(merged[k] for k in DESIGN_KNOBS))]  # fmt: skip


def design_code(design: dict) -> str:
    """``3t/7:1/rail/1p/400G/su8/ib`` for a knob mapping (values checked)."""
    gbps = parse_bandwidth(design["nic_speed"], "space.nic_speed") * 8 / 1e9
    ratio = float(design["oversubscription"])
    if not math.isfinite(ratio) or ratio < 1:
        raise SpecError("space.oversubscription", f"must be >= 1, got {ratio!r}")
    if design["attachment"] not in ("rail", "tor", "rail-only"):
        raise SpecError(
            "space.attachment", f"one of rail, tor, rail-only; got {design['attachment']!r}"
        )
    if design["transport"] not in TRANSPORTS:
        raise SpecError(
            "space.transport", f"one of {list(TRANSPORTS)}; got {design['transport']!r}"
        )
    for knob in ("tiers", "planes", "scale_up"):
        value = design[knob]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"space.{knob}", f"must be a positive integer, got {value!r}")
    return (
        f"{design['tiers']}t/{ratio:g}:1/{design['attachment']}/{design['planes']}p/"
        f"{gbps:g}G/su{design['scale_up']}/{design['transport']}"
    )


def parse_design(code: str) -> dict:
    """The knob mapping of a design code (inverse of :func:`design_code`)."""
    parts = code.split("/") if isinstance(code, str) else []
    if len(parts) != len(DESIGN_KNOBS):
        raise SpecError("design", f"expected e.g. '3t/7:1/rail/1p/400G/su8/ib', got {code!r}")
    tiers, ratio, attachment, planes, speed, scale_up, transport = parts
    try:
        return {
            "tiers": int(tiers.removesuffix("t")),
            "oversubscription": float(ratio.removesuffix(":1")),
            "attachment": attachment,
            "planes": int(planes.removesuffix("p")),
            "nic_speed": f"{speed.removesuffix('G')}Gbps",
            "scale_up": int(scale_up.removeprefix("su")),
            "transport": transport,
        }
    except ValueError:
        raise SpecError("design", f"cannot read design code {code!r}") from None


def design_spec(
    code: str,
    gpus: int,
    *,
    gpus_per_node: int = 8,
    scale_up_bandwidth: str = "900GB/s",
) -> dict:
    """The fabric spec of design ``code`` for at least ``gpus`` GPUs.

    Raises:
        SpecError: (``design``) no switch of that transport and port speed, a ratio the
            radix cannot split, or too few tiers for the GPU count.
    """
    d = parse_design(code)
    port_gbps = parse_bandwidth(d["nic_speed"], "nic_speed") * 8 / 1e9 / d["planes"]
    radix = RADIX.get((d["transport"], round(port_gbps)))
    if radix is None:
        raise SpecError("design", f"{code}: no {d['transport']} switch with {port_gbps:g}G ports")
    levels = d["tiers"]
    ratio = d["oversubscription"]
    tiers: list[dict] = []
    for level in range(1, levels + 1):
        if level == levels:
            tiers.append({"down_ports": radix})
            continue
        down = radix // 2
        if level == max(levels - 1, 1) and ratio != 1:
            down = round(radix * ratio / (1 + ratio))
            if abs(down - radix * ratio / (1 + ratio)) > 1e-9 or down >= radix:
                raise SpecError("design", f"{code}: radix {radix} cannot split at {ratio:g}:1")
        tiers.append({"down_ports": down, "up_ports": radix - down})
    if ratio != 1 and levels == 1:
        raise SpecError("design", f"{code}: a 1-tier fabric has no uplinks to oversubscribe")
    rails = gpus_per_node if d["attachment"] == "rail-only" else 1
    if d["attachment"] == "rail" and levels == 1:
        raise SpecError("design", f"{code}: rails cannot meet in one tier")
    below_top = math.prod(t["down_ports"] for t in tiers[:-1])
    unit = (
        gpus_per_node * tiers[0]["down_ports"]
        if d["attachment"] == "rail"
        else tiers[0]["down_ports"]
    )
    # whole leaves (rail groups), top blocks and scale-up domains
    step = math.lcm(math.lcm(unit, below_top) * rails, d["scale_up"])
    built = -(-gpus // step) * step
    top_blocks = built // rails // below_top
    if top_blocks > radix or (levels == 1 and built // rails > radix):
        raise SpecError(
            "design", f"{code}: {levels} tiers of radix {radix} cannot hold {gpus:,} GPUs"
        )
    if levels > 1:
        # bundle the uplinks into the top tier so that its switches fill up: the top tier
        # joins top_blocks blocks, and each of its switches takes one bundle per block
        up = tiers[-2]["up_ports"]
        bundle = max(b for b in range(1, up + 1)
                     if up % b == 0 and radix % b == 0 and top_blocks * b <= radix)  # fmt: skip
        if bundle > 1:
            tiers[-2]["uplink_bundle"] = bundle
    if d["scale_up"] % gpus_per_node or built % d["scale_up"]:
        raise SpecError(
            "design", f"{code}: scale-up domains of {d['scale_up']} do not tile the nodes"
        )
    for i, tier in enumerate(tiers):
        tier["name"] = ("leaf", "spine", "core", "super")[i]
    return {
        "name": f"design {code}",
        "description": f"{levels}-tier {d['attachment']} Clos, {ratio:g}:1 below the top, "
        f"{d['planes']} plane(s), {d['nic_speed']} per GPU, {d['transport']}",
        "gpus": built,
        "gpus_per_node": gpus_per_node,
        "scale_up": {"domain_size": d["scale_up"], "bandwidth_bidirectional": scale_up_bandwidth,
                     "nvls": True},
        "transport": TRANSPORTS[d["transport"]],
        "topology": {
            "type": "clos",
            "attachment": d["attachment"],
            "planes": d["planes"],
            "nic_bandwidth": f"{port_gbps:g}Gbps",
            "tiers": tiers,
        },
    }  # fmt: skip


def evaluate_design(
    *,
    design: str,
    jobs: list,
    gpu: str,
    layout_budget_work: int = DEFAULT_LAYOUT_BUDGET_WORK,
    cost: dict | None = None,
    scale_up_bandwidth: str = "900GB/s",
    calibration: dict | None = None,
    common: list | None = None,
) -> dict[str, float]:
    """Build design ``design``, give each job its best layout (alone on the fabric's first
    GPUs) and price it.

    Without ``common``, each job's layout comes from ``optimize_layout`` with a budget of
    ``layout_budget_work`` units of work (group structures solved plus candidates timed: the
    same answer on every run, however loaded the machine). With ``common`` (one list of
    candidates per job, each a mapping knob -> value of :mod:`fabricflow.layout_search.layout_codes`), each
    candidate is timed on this design and the fastest is the job's layout: the same
    candidate set timed on every design.

    ``jobs``: mappings ``{model, gpus, global_batch, seq_len}`` with optional ``fixed`` and
    ``space`` for the layout search. Returns :data:`METRICS` (the step time and MFU of the
    first job, tokens per second of all, network and total capex and power, network capex
    per GPU of the workload, cost per hour, per million tokens, per PFLOP/s-day, tokens per
    dollar, the GPUs built and the workload's, whether every layout search finished) and
    each job's layout coded as ``job<i>_<knob>`` (:func:`fabricflow.layout_search.layout_codes.encode`). ``calibration``: a
    :meth:`Calibration.to_dict <fabricflow.workload.calibration.Calibration.to_dict>`
    mapping every layout search uses.
    """
    calibrated = None if calibration is None else Calibration.from_dict(calibration)
    checked = check_jobs(jobs)
    total = sum(job["gpus"] for job in checked)
    fabric = build_fabric(design_spec(design, total, scale_up_bandwidth=scale_up_bandwidth))
    network = fabric_cost(fabric, cost)
    tokens = flops = 0.0
    first = []
    exhaustive = True
    coded: dict[str, float] = {}
    for i, job in enumerate(checked):
        if common is None:
            search = optimize_layout(
                job["model"], gpu, fabric, gpus=job["gpus"], global_batch=job["global_batch"],
                seq_len=job["seq_len"], fixed=job.get("fixed"), space=job.get("space"),
                top_k=1, budget_work=layout_budget_work, calibration=calibrated,
            )  # fmt: skip
            exhaustive &= bool(search.exhaustive)
            kwargs, best = search.best_kwargs, search.best
        else:
            kwargs, best = fastest_of(common[i], job, gpu, fabric, calibrated)
        coded.update(encode(candidate_of(kwargs), job, f"job{i}_"))
        first.append(best)
        tokens += best.tokens_per_s
        flops += best.tflops_per_gpu * job["gpus"]
    work = work_cost(network, gpu, tokens_per_s=tokens, model_tflops_per_gpu=flops / total,
                     gpus=total, whole_network=True)  # fmt: skip
    return {
        "step_time_s": first[0].step_time_s,
        "tokens_per_s": tokens,
        "mfu": first[0].mfu,
        "network_capex": network.capex,
        "network_power_W": network.power_W,
        "network_capex_per_gpu": network.capex / total,
        "capex": work.capex,
        "power_W": work.power_W,
        "cost_per_hour": work.per_hour,
        "cost_per_million_tokens": work.per_million_tokens,
        "tokens_per_dollar": work.tokens_per_dollar,
        "cost_per_pflops_day": work.per_pflops_day,
        "gpus": float(total),
        "fabric_gpus": float(fabric.num_gpus),
        "switches": float(network.bom.count(category="switch")),
        "layouts_exhaustive": float(exhaustive),
        **coded,
    }


def fastest_of(
    candidates: list, job: dict, gpu: str, fabric, calibration=None
) -> tuple[dict, StepResult]:
    """``(kwargs, result)`` of the fastest of ``candidates`` (knob -> value mappings) for
    ``job`` on ``fabric``, each timed alone (``optimize_layout`` with every knob pinned,
    ``calibration`` applied); candidates that do not run on this fabric are skipped.

    Raises:
        SpecError: (``layout``) none of them runs here, with the first refusal.
    """
    best: tuple[dict, StepResult] | None = None
    refusals = []
    for candidate in candidates:
        # one point: every coded knob at the candidate's value (the others take the job's
        # fixed value or the default, as in its search)
        point = {k: [candidate[k]] for k in coded_knobs(job) if k != "dp"}
        try:
            search = optimize_layout(
                job["model"], gpu, fabric, gpus=job["gpus"], global_batch=job["global_batch"],
                seq_len=job["seq_len"], fixed=job.get("fixed"), space=point or None, top_k=1,
                calibration=calibration,
            )  # fmt: skip
        except (SpecError, RoutingError) as error:
            refusals.append(str(error))
            continue
        if best is None or search.best.step_time_s < best[1].step_time_s:
            best = (search.best_kwargs, search.best)
    if best is None:
        raise SpecError("layout", "no common layout runs on this design: " + refusals[0])
    return best


def design_metrics(jobs: list) -> tuple[str, ...]:
    """The metrics :func:`evaluate_design` returns for ``jobs``: :data:`METRICS` and each
    job's coded layout."""
    checked = check_jobs(jobs)
    coded = [name for i, job in enumerate(checked) for name in metric_names(f"job{i}_", job)]
    return (*METRICS, *coded)


evaluate_design.metrics = METRICS  # type: ignore[attr-defined]


def check_jobs(jobs) -> list[dict]:
    """Jobs as checked mappings (``model``, ``gpus``, ``global_batch``, ``seq_len``)."""
    if not isinstance(jobs, list | tuple) or not jobs:
        raise SpecError("jobs", f"expected a non-empty list of jobs, got {jobs!r}")
    out = []
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise SpecError(f"jobs[{i}]", f"expected a mapping, got {job!r}")
        unknown = sorted(set(job) - {"model", "gpus", "global_batch", "seq_len", "fixed", "space"})
        if unknown:
            raise SpecError(f"jobs[{i}]", f"unknown key(s) {unknown}")
        for key in ("gpus", "global_batch", "seq_len"):
            value = job.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"jobs[{i}].{key}", f"must be a positive integer, got {value!r}")
        if not isinstance(job.get("model"), str):
            raise SpecError(f"jobs[{i}].model", f"a model preset name, got {job.get('model')!r}")
        out.append(dict(job))
    return out
