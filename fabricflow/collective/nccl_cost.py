"""The NCCL-like cost model: protocols, per-step latencies, efficiencies, channel counts.

A collective runs as *phases* of concurrent transfers (see :mod:`.phase`). A transfer
moves ``B`` bytes over a sequence of hops at the fluid rate ``r`` the max-min solver gives
it on the shared fabric, so its time is::

    t = B / (r * protocol_efficiency * algorithm_efficiency)
        + sum over critical-path hops of (path latency + software overhead per step)

and a collective adds the algorithm's base (launch) latency once. The constants below
are NCCL's own (``src/graph/tuning.cc``, v2.2x-2.30) or physical facts, see docs/references.md §4:

* **Protocols** trade latency for bandwidth. ``LL`` sends 8-byte words carrying 4 bytes
  of data and a 4-byte flag (bandwidth efficiency 1/2, lowest latency); ``LL128`` sends
  128-byte lines carrying 120 bytes of data (120/128); ``Simple`` uses plain copies with
  a memory fence per 512 KiB step (full bandwidth, highest latency).
* **Per-step overhead** (us) of one hop, for a hop inside a scale-up domain and one across
  the network, per protocol ``(LL, LL128, Simple)`` -- NCCL's "hardware latency" table. The
  fabric's own path latency (switches, cables) is added on top.
* **Base latency** per algorithm family and protocol, once per collective.
* **Link efficiency**: the fraction of a link's line rate that carries payload.
  Scale-up (NVLink4) measured GPU-to-GPU copy throughput is ~375 GB/s of the 450 GB/s per
  direction (flit headers, CRC, credits): 0.83. Network (InfiniBand NDR / RoCE 400G):
  46-48 GB/s of 50 GB/s are measured with one NIC (packet headers, PCIe TLP overhead):
  0.94. These are properties of the link technology, applied to every algorithm alike.
* **NVLS efficiency** 0.85 on Hopper (NCCL's ``nvlsEfficiency``; 0.74 on Blackwell): the
  NVSwitch multimem reduction does not run at full link rate.
* **Latency scales** (1 by default): a system's measured per-step latencies relative to
  NCCL's tables, one for the scale-up domain (scale-up steps and the launch latency) and
  one for the network (network steps). Calibration from nccl-tests logs fits them with
  the efficiencies (docs/calibration.md); they are per system, never per collective.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from fabricflow.errors import SpecError

PROTOCOLS = ("LL", "LL128", "Simple")

_US = 1e-6


def _table(**rows):
    return MappingProxyType({key: tuple(v * _US for v in value) for key, value in rows.items()})


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Constants of the time model; the defaults are NCCL's (Hopper) and are documented above.

    Attributes:
        protocol_efficiency: bandwidth efficiency of each protocol (``LL``, ``LL128``,
            ``Simple``), a fraction of the link payload rate.
        base_latency_s: per algorithm family (``ring``, ``tree``, ``nvls``, ``p2p``), the
            launch latency in seconds for ``(LL, LL128, Simple)``.
        intra_step_s / network_step_s: per algorithm family, software overhead of one step
            over a scale-up hop / a network hop, seconds for ``(LL, LL128, Simple)``.
        scale_up_efficiency / network_efficiency: payload fraction of a scale-up link / any
            other link (applied to capacities before solving).
        nvls_efficiency: throughput factor of NVSwitch in-network reduction.
        sharp_efficiency: throughput factor of switch (SHARP) in-network reduction.
        channels_per_rail: default ring/tree channels per rail (NCCL opens two execution
            channels per search channel, one search channel per NIC / local GPU).
        scale_up_latency_scale: multiplies the launch latency and every scale-up step's
            overhead (1: NCCL's tables).
        network_latency_scale: multiplies every network step's overhead (1: NCCL's table).
    """

    protocol_efficiency: MappingProxyType = dataclasses.field(
        default_factory=lambda: MappingProxyType({"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0})
    )
    base_latency_s: MappingProxyType = dataclasses.field(
        default_factory=lambda: _table(
            ring=(6.6, 14.0, 8.4), tree=(6.8, 14.0, 8.4), nvls=(0.0, 0.0, 0.0), p2p=(6.6, 14.0, 8.4)
        )
    )
    intra_step_s: MappingProxyType = dataclasses.field(
        default_factory=lambda: _table(
            ring=(0.6, 1.9, 3.4),
            tree=(0.6, 1.25, 4.0),
            nvls=(25.0, 25.0, 25.0),
            p2p=(0.6, 1.9, 3.4),
        )
    )
    network_step_s: MappingProxyType = dataclasses.field(
        default_factory=lambda: _table(
            ring=(2.7, 4.0, 14.0),
            tree=(5.0, 8.5, 14.0),
            nvls=(18.0, 18.0, 18.0),
            p2p=(2.7, 4.0, 14.0),
        )
    )
    scale_up_efficiency: float = 0.83
    network_efficiency: float = 0.94
    nvls_efficiency: float = 0.85
    sharp_efficiency: float = 0.90
    channels_per_rail: int = 2
    scale_up_latency_scale: float = 1.0
    network_latency_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in (
            "scale_up_efficiency",
            "network_efficiency",
            "nvls_efficiency",
            "sharp_efficiency",
        ):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise SpecError(name, f"must lie in (0, 1], got {value}")
        if set(self.protocol_efficiency) != set(PROTOCOLS):
            raise SpecError("protocol_efficiency", f"needs exactly the protocols {list(PROTOCOLS)}")
        for proto, value in self.protocol_efficiency.items():
            if not 0.0 < value <= 1.0:
                raise SpecError(f"protocol_efficiency.{proto}", f"must lie in (0, 1], got {value}")
        for name in ("scale_up_latency_scale", "network_latency_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 < value < float("inf")):
                raise SpecError(name, f"must be a finite number > 0, got {value!r}")
        if int(self.channels_per_rail) < 1:
            raise SpecError("channels_per_rail", f"must be >= 1, got {self.channels_per_rail}")

    def step_overhead_s(self, family: str, protocol: str) -> tuple[float, float]:
        """``(intra, network)`` software overhead of one step, seconds."""
        index = protocol_index(protocol)
        return (
            self.intra_step_s[family][index] * self.scale_up_latency_scale,
            self.network_step_s[family][index] * self.network_latency_scale,
        )

    def base_s(self, family: str, protocol: str) -> float:
        """Launch latency of one collective of ``family`` with ``protocol``, seconds."""
        return self.base_latency_s[family][protocol_index(protocol)] * self.scale_up_latency_scale

    def key(self) -> tuple:
        """A hashable summary of every constant (for caches keyed by the cost model)."""
        out = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, MappingProxyType):
                value = tuple(sorted(value.items()))
            out.append((field.name, value))
        return tuple(out)


def protocol_index(protocol: str) -> int:
    if protocol not in PROTOCOLS:
        raise SpecError(
            "protocol", f"unknown protocol {protocol!r}; one of {list(PROTOCOLS)} or 'auto'"
        )
    return PROTOCOLS.index(protocol)


def protocols_for(protocol: str, family: str) -> tuple[str, ...]:
    """Protocols to consider: NVLS runs Simple only (as in NCCL); ``auto`` tries all."""
    if protocol == "auto":
        return ("Simple",) if family == "nvls" else PROTOCOLS
    protocol_index(protocol)
    if family == "nvls" and protocol != "Simple":
        raise SpecError("protocol", "NVLS/SHARP in-network reduction runs the Simple protocol only")
    return (protocol,)


DEFAULT_COST = CostModel()
