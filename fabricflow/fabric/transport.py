"""Transport semantics of a fabric: the ``transport:`` key of a spec -> :class:`Transport`.

The scale-out protocol decides how a fabric spreads a flow over its equal-cost paths and
how it stays lossless; the fluid model keeps both as *routing* (see docs/transport.md)::

    transport: infiniband                    # short form: the protocol's defaults
    transport: {protocol: rocev2, adaptive_routing: true}    # e.g. Spectrum-X

Protocols:

* ``infiniband``: credit-based link-level flow control (lossless by construction) and, where
  the subnet manager enables it, adaptive routing: switches pick the least-loaded
  equal-cost output port per packet. Default ``adaptive_routing: true`` (OpenSM enables AR
  by default; NCCL uses AR-capable transfers on IB).
* ``rocev2``: RDMA over UDP/IP on Ethernet, lossless through PFC with DCQCN congestion
  control; switches hash each flow's 5-tuple onto one equal-cost path (per-flow ECMP).
  Default ``adaptive_routing: false``; Spectrum-X style Ethernet with per-packet adaptive
  routing sets it true.
* ``slingshot``: HPE Slingshot (Ethernet-based, credit-based lossless links, hardware
  congestion control, adaptive routing on dragonflies). Default ``adaptive_routing: true``.
* ``ici``: TPU inter-chip interconnect on a torus (credit-based, lossless). Default
  ``adaptive_routing: false``.
* ``uet``: the Ultra Ethernet transport (UEC 1.0): loss-tolerant rather than lossless
  (switches trim the payload of packets over their buffer and the sender retransmits
  selectively; no PFC), NSCC and RCCC congestion control, per-packet spraying over all
  paths. Default ``adaptive_routing: true`` (spraying).

:func:`fabricflow.routing.transport_policy.routing_for` turns the transport into the
routing policy the collective and step models use by default (``routing="auto"``): an even split over all equal-cost paths
(``adaptive``, spray's compact form) where adaptive routing is on and the fabric's router
can spray (Clos; ``spray`` on graph fabrics such as imported files), one
hashed path per flow (``ecmp``) otherwise. A spec without ``transport`` gets ``rocev2``
without adaptive routing: one path per flow.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fabricflow.errors import SpecError

# protocol -> (default adaptive_routing, lossless mechanism, congestion control)
PROTOCOLS: dict[str, tuple[bool, str, str]] = {
    "infiniband": (
        True,
        "credit-based link-level flow control",
        "IBA congestion control (FECN/BECN)",
    ),
    "rocev2": (False, "PFC (priority flow control)", "DCQCN"),
    "slingshot": (
        True,
        "credit-based link-level flow control",
        "Slingshot hardware congestion control",
    ),
    "ici": (False, "credit-based link-level flow control", "credits only"),
    "uet": (
        True,
        "not lossless: packet trimming with selective retransmission (no PFC)",
        "NSCC (ECN and delay) and RCCC (receiver credits)",
    ),
}
TRANSPORT_KEYS = ("protocol", "adaptive_routing")


@dataclasses.dataclass(frozen=True)
class Transport:
    """The scale-out transport of a fabric.

    Attributes:
        protocol: ``infiniband``, ``rocev2``, ``slingshot``, ``ici`` or ``uet``.
        adaptive_routing: switches spread each flow's packets over the equal-cost paths by
            load (IB AR, Spectrum-X, Slingshot) instead of hashing the flow onto one path;
            ``None``: the protocol's default (see :data:`PROTOCOLS`).
    """

    protocol: str = "rocev2"
    adaptive_routing: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, str) or self.protocol not in PROTOCOLS:
            raise SpecError(
                "transport.protocol",
                f"unknown protocol {self.protocol!r}; one of {list(PROTOCOLS)}",
                value=self.protocol,
                allowed=PROTOCOLS,
            )
        if self.adaptive_routing is None:
            object.__setattr__(self, "adaptive_routing", PROTOCOLS[self.protocol][0])
        if not isinstance(self.adaptive_routing, bool):
            raise SpecError(
                "transport.adaptive_routing",
                f"must be true or false, got {self.adaptive_routing!r}",
            )

    @property
    def lossless(self) -> str:
        """How the transport avoids drops, or (``uet``) recovers from them."""
        return PROTOCOLS[self.protocol][1]

    @property
    def congestion_control(self) -> str:
        return PROTOCOLS[self.protocol][2]

    @property
    def load_balancing(self) -> str:
        """``per-packet adaptive`` (``per-packet spraying`` for ``uet``) or ``per-flow hash``."""
        if not self.adaptive_routing:
            return "per-flow hash"
        return "per-packet spraying" if self.protocol == "uet" else "per-packet adaptive"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (what ``fabricflow fabric`` prints)."""
        return {
            "protocol": self.protocol,
            "adaptive_routing": self.adaptive_routing,
            "load_balancing": self.load_balancing,
            "lossless": self.lossless,
            "congestion_control": self.congestion_control,
        }


DEFAULT_TRANSPORT = Transport()


def parse_transport(value: Any, field: str = "transport") -> Transport:
    """A spec's ``transport`` value (a protocol name or a mapping) -> :class:`Transport`.

    Raises:
        SpecError: an unknown protocol (field ``transport.protocol``, naming the allowed
            ones), an unknown key, or a non-boolean ``adaptive_routing``.
    """
    if value is None:
        return DEFAULT_TRANSPORT
    if isinstance(value, str):
        value = {"protocol": value}
    if not isinstance(value, dict):
        raise SpecError(
            field,
            f"expected a protocol name ({list(PROTOCOLS)}) or a mapping with keys "
            f"{list(TRANSPORT_KEYS)}, got {value!r}",
        )
    unknown = sorted(set(map(str, value)) - set(TRANSPORT_KEYS))
    if unknown:
        raise SpecError(
            field,
            f"unknown key(s) {unknown}; allowed keys: {list(TRANSPORT_KEYS)}",
            value=unknown[0],
            allowed=TRANSPORT_KEYS,
        )
    if "protocol" not in value:
        raise SpecError(f"{field}.protocol", f"is required; one of {list(PROTOCOLS)}")
    protocol = value["protocol"]
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise SpecError(
            f"{field}.protocol",
            f"unknown protocol {protocol!r}; one of {list(PROTOCOLS)}",
            value=protocol,
            allowed=PROTOCOLS,
        )
    adaptive = value.get("adaptive_routing")
    if adaptive is not None and not isinstance(adaptive, bool):
        raise SpecError(f"{field}.adaptive_routing", f"must be true or false, got {adaptive!r}")
    return Transport(protocol, adaptive)
