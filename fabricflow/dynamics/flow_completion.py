"""``ff.flow_completion_times``: per-flow completion times at fluid or packet fidelity.

``fidelity="fluid"`` is the max-min event engine
(:func:`fabricflow.solve.completion.max_min_completion`, unchanged) plus propagation.
``fidelity="packet"`` adds the packet-level effects that make a packet simulator's flows
slower, each a separate, physical mechanism (docs/fct.md):

* framing: ``mtu``-byte packets with ``header`` bytes each (:mod:`fabricflow.solve.packet.overheads`);
* store-and-forward: one packet serialization per hop beyond the narrowest one;
* the ACK return over the reverse path;
* with PFC on and no congestion control: FIFO egress queues, PFC head-of-line blocking
  (victim flows, pause spreading) with the pause frame's delay, and the last ACK queued
  behind the data on its return path (:mod:`fabricflow.solve.packet.pfc_queues`).
  With ``cc="dcqcn"`` the senders converge to their fair share, so the transfer is the
  max-min one and PFC pauses only in transients, which are not modeled.

Times: ``fct`` runs from the flow's start until the sender receives the ACK of its last
byte; ``delivered`` until the last byte reaches the receiver. Both include propagation.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from fabricflow.errors import SolverError, SpecError
from fabricflow.memory_budget import check_memory
from fabricflow.solve.completion import max_min_completion
from fabricflow.solve.packet.overheads import PacketParams, path_costs, reverse_links, wire_bytes
from fabricflow.solve.packet.pfc_queues import simulate_lossless
from fabricflow.solve.packet.queue_structure import ARBITRATIONS, build_groups
from fabricflow.solve.pfc.params import PFCParams
from fabricflow.solve.status import SolverStatus

FIDELITIES = ("fluid", "packet")
CC_CHOICES = (None, "dcqcn")
MECHANISMS = ("latency", "serialization", "bandwidth_share", "pfc_hol")


@dataclasses.dataclass(frozen=True)
class FlowTimes:
    """Per-flow completion times.

    Attributes:
        fct: float64 ``[F]`` seconds from start to the sender's receipt of the last ACK.
        delivered: float64 ``[F]`` seconds from start to the last byte at the receiver.
        components: name -> float64 ``[F]`` seconds: ``propagation`` (forward),
            ``store_forward``, ``ack`` (the last ACK's trip back), ``serialization``
            (wire bytes at the narrowest link's rate), ``bandwidth_share`` (extra transfer
            time from max-min sharing), ``pfc_hol`` (extra transfer time from port
            arbitration and PFC blocking beyond max-min; negative where a flow gains),
            ``ack_queueing`` (the last ACK's wait behind data and pauses on its way back;
            0 outside the PFC engine). ``fct`` is their sum.
        dominant: str ``[F]``: the mechanism with the largest share of each flow's time:
            ``latency`` (propagation + store-and-forward + ACK), ``serialization``,
            ``bandwidth_share`` or ``pfc_hol``.
        fidelity: ``"fluid"`` or ``"packet"``. settings: the options used.
        seconds: wall time of the solve (``solve``) and the whole call (``total``).
        events: rate solves of the transfer engine.
    """

    fct: np.ndarray
    delivered: np.ndarray
    components: dict
    dominant: np.ndarray
    fidelity: str
    settings: dict
    seconds: dict
    events: int

    def percentiles(self, scale: float = 1e6) -> dict:
        """``{"p50", "p90", "p99", "max", "mean"}`` of ``fct`` times ``scale`` (default µs)."""
        return percentiles(self.fct, scale)

    def dominant_counts(self) -> dict:
        """Flows per dominant mechanism."""
        return {name: int(np.sum(self.dominant == name)) for name in MECHANISMS}


def percentiles(values: np.ndarray, scale: float = 1e6) -> dict:
    """``{"p50", "p90", "p99", "max", "mean"}`` of ``values * scale`` (linear interpolation)."""
    values = np.asarray(values, np.float64) * scale
    if values.size == 0:
        return {key: None for key in ("p50", "p90", "p99", "max", "mean")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(values.max()),
        "mean": float(values.mean()),
    }


def flow_completion_times(
    fabric,
    routes,
    size,
    *,
    start=None,
    fidelity: str = "fluid",
    pfc: bool = True,
    pfc_params: PFCParams | None = None,
    cc: str | None = None,
    packet: PacketParams | None = None,
    arbitration: str = "fifo",
    mode: str = "exact",
    eps: float | None = None,
    dt: float | None = None,
    max_steps: int = 50_000_000,
) -> FlowTimes:
    """Completion time of every flow of ``routes`` on ``fabric``.

    Args:
        fabric: :class:`~fabricflow.Fabric`. routes: :class:`~fabricflow.Routes` of it.
        size: ``[F]`` (or a scalar for all flows) payload bytes, finite and > 0.
        start: ``[F]`` start times in seconds, >= 0 (default all 0).
        fidelity: ``"fluid"`` (max-min engine + propagation, the default: the engine the
            planner's models build on, and the cheap one) or ``"packet"``. The
            ``fabricflow fct`` command defaults to ``packet`` instead: it answers what a
            packet simulator would measure, with both fidelities side by side in
            ``--out``.
        pfc: ``True`` (lossless fabric, PFC on) or ``False``, which at packet fidelity
            needs ``cc="dcqcn"``: a lossy fabric without congestion control drops
            packets, and retransmission is not modeled. The fluid fidelity has no
            packets: ``pfc`` and ``cc`` do not change it.
        pfc_params: :class:`~fabricflow.PFCParams`, the static ``xoff`` and
            ``hysteresis`` of PFC when on (default ``PFCParams()``), as for
            :func:`fabricflow.simulate_cc`.
        cc: ``None`` (no congestion control: senders at line rate, paced only by PFC) or
            ``"dcqcn"``.
        packet: :class:`~fabricflow.solve.packet.overheads.PacketParams` (default 9000-B
            packets, 64-B headers, 64-B ACKs); packet fidelity only.
        arbitration: how a switch egress of the PFC engine orders transit packets:
            ``"fifo"`` (default: one output queue, the shared-buffer switches of RoCE
            fabrics) or ``"round_robin"`` (one queue per input port, served in turn).
        mode, eps: of the max-min engine (:func:`~fabricflow.max_min_completion`).
        dt: step of the PFC engine in seconds (default one ``mtu`` packet's time on the
            fastest link used). max_steps: its loop bound.

    Returns:
        :class:`FlowTimes`.

    Raises:
        SpecError: bad sizes, starts, fidelity, cc, arbitration, or PFC off without congestion
            control; routes that are not paths of ``fabric`` (built on another one);
            multipath routes (``coef``) with the PFC engine, which follows one path per
            flow.
    """
    began = time.perf_counter()
    pfc_params = _check_options(fidelity, cc, arbitration, pfc, pfc_params)
    links = _check_routes(fabric, routes)
    num_flows = links.shape[0]
    size = _flow_values("size", size, num_flows, positive=True)
    start = np.zeros(num_flows) if start is None else _flow_values("start", start, num_flows)
    params = (PacketParams() if packet is None else packet).validate()
    capacity = np.asarray(fabric.capacity, np.float64)
    latency = np.asarray(fabric.latency, np.float64)
    reverse = reverse_links(fabric.link_src, fabric.link_dst)

    packet_mode = fidelity == "packet"
    if packet_mode:
        wire, first = wire_bytes(size, params)
    else:
        wire, first = size, np.zeros(num_flows)
    # a split flow's fixed costs are the mean over its paths ("adaptive" rows hold one
    # representative link per hop level: their plain sum is the path)
    split = routes.coef is not None and not routes.policy.startswith("adaptive")
    weight = np.asarray(routes.coef, np.float64) if split else None
    costs = path_costs(links, capacity, latency, first, params, reverse, weight)
    solve_began = time.perf_counter()
    fair, lossless = _transfer(
        links,
        capacity,
        latency,
        wire,
        start,
        routes.coef,
        reverse,
        lossless_engine=packet_mode and cc is None,
        engine_args=(params, pfc_params, (dt, max_steps), arbitration, mode, eps),
    )
    solve_s = time.perf_counter() - solve_began
    fair_time = fair.elapsed  # start to finish, at full resolution whatever the start
    if lossless is None:  # the max-min transfer is the transfer
        transfer, ack_queueing, events, pfc_info = fair_time, np.zeros(num_flows), fair.events, {}
    else:
        transfer, ack_queueing, events, pfc_info = lossless

    if packet_mode:
        ack, store_forward = costs["ack"], costs["store_forward"]
    else:  # the fluid model: propagation both ways, no packets
        ack = _reverse_propagation(links, latency, reverse, weight)
        store_forward = np.zeros(num_flows)
    serialization = wire / costs["min_capacity"]
    components = {
        "propagation": costs["propagation"],
        "store_forward": store_forward,
        "ack": ack,
        "serialization": serialization,
        "bandwidth_share": fair_time - serialization,
        "pfc_hol": transfer - fair_time,
        "ack_queueing": ack_queueing,
    }
    delivered, fct, dominant = _completion_totals(components, transfer)
    settings = _settings(fidelity, pfc, cc, params, arbitration)
    settings.update(pfc_info)
    seconds = {"solve": solve_s, "total": time.perf_counter() - began}
    return FlowTimes(fct, delivered, components, dominant, fidelity, settings, seconds, int(events))


def _check_options(fidelity, cc, arbitration, pfc, pfc_params) -> PFCParams:
    """The ``pfc_params`` to use (``PFCParams()`` when ``None``) after checking the
    options of :func:`flow_completion_times` that need no fabric: ``fidelity``, ``cc``,
    ``arbitration``, ``pfc``, ``pfc_params`` (in that order), and that PFC off at packet
    fidelity comes with congestion control.

    Raises:
        SpecError: the first option out of its choices.
    """
    if fidelity not in FIDELITIES:
        raise SpecError("fidelity", f"must be one of {list(FIDELITIES)}, got {fidelity!r}")
    if cc not in CC_CHOICES:
        raise SpecError("cc", f"must be one of {list(CC_CHOICES)}, got {cc!r}")
    if arbitration not in ARBITRATIONS:
        raise SpecError("arbitration", f"must be one of {list(ARBITRATIONS)}, got {arbitration!r}")
    if not isinstance(pfc, (bool, np.bool_)):
        raise SpecError("pfc", f"must be True or False, got {pfc!r}")
    if pfc_params is None:
        pfc_params = PFCParams()
    elif isinstance(pfc_params, PFCParams):
        pfc_params.validate()
    else:
        raise SpecError("pfc_params", f"must be a PFCParams or None, got {pfc_params!r}")
    if fidelity == "packet" and not pfc and cc is None:
        raise SpecError(
            "pfc",
            "PFC off needs cc='dcqcn': a lossy fabric without congestion control drops "
            "packets and their retransmission is not modeled; allowed: pfc on, or cc dcqcn",
        )
    return pfc_params


def _transfer(
    links, capacity, latency, wire, start, coef, reverse, *, lossless_engine, engine_args
):
    """``(fair, lossless)``: the max-min transfer of every flow (the
    :func:`~fabricflow.max_min_completion` result: ``elapsed`` float64 ``[F]`` seconds from
    start to the last byte, ``events``) and, when ``lossless_engine`` (packet fidelity
    without congestion control), the PFC engine's ``(transfer, ack_queueing, events,
    pfc_info)`` of :func:`_lossless_transfer`, else ``None``.

    ``wire`` is float64 ``[F]`` bytes on the wire, ``start`` ``[F]`` seconds; ``coef`` the
    routes' split (``None`` for one path per flow); ``engine_args`` is ``(packet params,
    pfc params, (dt, max_steps), arbitration, mode, eps)``.

    Raises:
        SpecError: multipath routes (``coef``) for the PFC engine, which follows one path
            per flow (checked after the max-min solve, as the call always did).
    """
    params, pfc_params, steps, arbitration, mode, eps = engine_args
    fair = max_min_completion(links, capacity, wire, start=start, coef=coef, mode=mode, eps=eps)
    if not lossless_engine:
        return fair, None
    if coef is not None:
        raise SpecError(
            "routes",
            "the PFC engine (packet fidelity, cc None) follows one path per flow; "
            "multipath/spray routes split flows: use ecmp routing or cc='dcqcn'",
        )
    lossless = _lossless_transfer(
        links, capacity, latency, wire, start, params, pfc_params, steps, reverse, arbitration
    )
    return fair, lossless


def _settings(fidelity, pfc, cc, params, arbitration) -> dict:
    """The options a :class:`FlowTimes` reports in ``settings``: ``fidelity``, ``pfc``,
    ``cc``, and the packet sizes in bytes (``mtu_bytes``, ``header_bytes``, ``ack_bytes``)
    and ``arbitration`` where the fidelity uses them (``None`` otherwise)."""
    packet_mode = fidelity == "packet"
    return {
        "fidelity": fidelity,
        "pfc": bool(pfc),
        "cc": cc,
        "mtu_bytes": params.mtu if packet_mode else None,
        "header_bytes": params.header if packet_mode else None,
        "ack_bytes": params.ack_bytes if packet_mode else None,
        "arbitration": arbitration if packet_mode and cc is None else None,
    }


def _completion_totals(
    components: dict, transfer: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(delivered, fct, dominant)`` of every flow from its :attr:`FlowTimes.components`
    and its ``transfer`` time (float64 ``[F]`` seconds each, start to the last byte
    through its last link): the last byte at the receiver (with forward propagation and
    store-and-forward), the last ACK back at the sender, and the mechanism
    (:data:`MECHANISMS`) with the largest share of the flow's time."""
    c = components
    delivered = transfer + c["propagation"] + c["store_forward"]
    fct = delivered + c["ack"] + c["ack_queueing"]
    shares = np.stack(
        [
            c["propagation"] + c["store_forward"] + c["ack"],
            c["serialization"],
            c["bandwidth_share"],
            c["pfc_hol"] + c["ack_queueing"],
        ]
    )
    return delivered, fct, np.asarray(MECHANISMS)[np.argmax(shares, axis=0)]


def _lossless_transfer(
    links,
    capacity,
    latency,
    wire,
    start,
    params,
    pfc_params,
    loop,
    reverse,
    arbitration,
):
    """Transfer times and last-ACK queueing (s, ``[F]`` each), steps, and settings of the
    PFC queue engine."""
    dt, max_steps = loop
    xoff = float(np.max(pfc_params.xoff))
    xon = xoff - float(np.max(pfc_params.hysteresis))
    if xoff < params.mtu:
        raise SpecError(
            "pfc.xoff",
            f"must hold at least one packet (mtu {params.mtu:g} bytes) for the queues to "
            f"move, got {xoff:g} bytes",
        )
    used = np.unique(links[links >= 0])
    if dt is None:
        dt = params.mtu / capacity[used].max()
    elif isinstance(dt, bool) or not np.isfinite(dt) or dt <= 0:
        raise SpecError("dt", f"must be a time > 0 seconds, got {dt!r}")
    if isinstance(max_steps, bool) or not 1 <= int(max_steps) <= 2**31 - 1:
        raise SpecError("max_steps", f"must be an integer in 1..2**31-1, got {max_steps!r}")
    entries = int(np.count_nonzero(links >= 0))
    # ~14 float64/int32 arrays per hop entry (queues, groups, gathers) inside the loop
    check_memory(
        entries * 112 + links.shape[0] * 64,
        f"PFC engine over {links.shape[0]:,} flows ({entries:,} hops)",
        hint="use cc='dcqcn' (max-min transfer) or fewer flows",
    )
    groups = build_groups(links, capacity.shape[0], reverse=reverse, arbitration=arbitration)
    # the engine's clock starts at the earliest start (one time base: absolute starts of
    # 1e9 s would otherwise cost steps and resolution)
    start = start - (start.min() if start.size else 0.0)
    with jax.enable_x64(True):
        run = jax.block_until_ready(
            simulate_lossless(
                groups,
                capacity,
                wire,
                start,
                dt=dt,
                xoff=xoff,
                xon=xon,
                max_steps=int(max_steps),
                pause_delay=2 * latency,
            )
        )
    status = SolverStatus(int(run.status))
    if status != SolverStatus.CONVERGED:
        raise SolverError(
            f"flow_completion_times: the PFC engine stopped after {int(run.steps)} steps of "
            f"{dt:.3g} s: {status.message.replace('max_iters', 'max_steps')}"
        )
    finish = np.asarray(run.finish_time, np.float64)
    info = {
        "dt_s": float(dt),
        "pfc_xoff_bytes": xoff,
        "pfc_xon_bytes": xon,
        "steps": int(run.steps),
        "links_ever_paused": int(np.sum(np.asarray(run.paused_fraction) > 0)),
        "mean_pause_fraction_paused_links": float(
            np.mean(np.asarray(run.paused_fraction)[np.asarray(run.paused_fraction) > 0])
        )
        if np.any(np.asarray(run.paused_fraction) > 0)
        else 0.0,
    }
    return finish - start, np.asarray(run.ack_wait, np.float64), int(run.steps), info


def _check_routes(fabric, routes) -> np.ndarray:
    """``routes.links`` once the routes are known to be paths of ``fabric``: the same
    link count, and every row a chain of links from its flow's source GPU to its
    destination GPU (routes of another fabric fail one of these).

    Raises:
        SpecError: ``routes``, naming the first flow that is not a path of ``fabric``.
    """
    links = np.asarray(routes.links)
    if routes.num_links != fabric.num_links:
        raise SpecError(
            "routes",
            f"built for a fabric of {routes.num_links:,} links, but {fabric.name!r} has "
            f"{fabric.num_links:,}: route on the same fabric (ff.route(fabric, ...))",
        )
    src, dst = np.asarray(routes.src, np.int64), np.asarray(routes.dst, np.int64)
    num_gpus = fabric.gpu_node.shape[0]
    if np.any((src < 0) | (src >= num_gpus) | (dst < 0) | (dst >= num_gpus)):
        raise SpecError("routes", f"flow endpoints outside the fabric's {num_gpus:,} GPUs")
    if links.size == 0:
        return links
    valid = links >= 0
    safe = np.where(valid, links, 0)
    hops = valid.sum(axis=1)
    head = np.asarray(fabric.link_src)[safe]
    tail = np.asarray(fabric.link_dst)[safe]
    source, target = fabric.gpu_node[src][:, None], fabric.gpu_node[dst][:, None]
    if routes.coef is None:  # one path per row: a chain from source to target
        rows = np.arange(links.shape[0])
        chained = ~valid[:, 1:] | (head[:, 1:] == tail[:, :-1])
        ok = np.all(chained, axis=1) & (hops > 0) & (head[:, 0] == source[:, 0])
        ok &= tail[rows, np.maximum(hops - 1, 0)] == target[:, 0]
    else:  # several paths per row: some entry leaves the source, some enters the target
        ok = np.any(valid & (head == source), axis=1) & np.any(valid & (tail == target), axis=1)
    if not np.all(ok):
        flow = int(np.flatnonzero(~ok)[0])
        raise SpecError(
            "routes",
            f"flow {flow} ({int(src[flow])} -> {int(dst[flow])}) is not a path of "
            f"{fabric.name!r}: routes built on another fabric? route on this one "
            "(ff.route(fabric, ...))",
        )
    return links


def _reverse_propagation(links, latency, reverse, weight=None) -> np.ndarray:
    valid = links >= 0
    safe = np.where(valid, links, 0)
    back = np.where(reverse[safe] >= 0, reverse[safe], safe)
    share = 1.0 if weight is None else weight
    return np.where(valid, latency[back] * share, 0.0).sum(axis=1)


def _flow_values(name: str, values, num_flows: int, *, positive: bool = False) -> np.ndarray:
    """float64 ``[F]`` from a scalar or an ``[F]`` array; finite, ``> 0`` or ``>= 0``."""
    try:
        array = np.asarray(values, np.float64)
    except (TypeError, ValueError) as error:
        raise SpecError(name, f"must be numbers, got {values!r}") from error
    if array.ndim == 0:
        array = np.full(num_flows, float(array))
    if array.shape != (num_flows,):
        raise SpecError(name, f"must be a scalar or have shape [{num_flows}], got {array.shape}")
    bad = ~np.isfinite(array) | ((array <= 0) if positive else (array < 0))
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        need = "finite and > 0 bytes" if positive else "finite and >= 0 seconds"
        raise SpecError(
            name, f"must be {need}; flow {index} has {array[index]!r} ({int(bad.sum())} bad)"
        )
    return array
