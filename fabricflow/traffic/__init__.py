"""Traffic: GPU-to-GPU flow lists. Synthetic patterns (:mod:`.patterns`) and the htsim
connection matrices packet simulators share (:mod:`.htsim`)."""

from fabricflow.traffic import htsim, patterns

__all__ = ["htsim", "patterns"]
