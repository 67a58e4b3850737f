"""ECN marking at switch egress queues (RED), in numerically safe form.

RED (Floyd and Jacobson, IEEE/ACM ToN 1993) as configured for DCQCN: no mark at or below
``kmin`` bytes of queue, a probability rising linearly to ``pmax`` at ``kmax``, every
packet marked above ``kmax``. A flow sees ``1 - prod(1 - p_l)`` over its path; the
integrator carries ``log(1 - p)`` per link so that the path's value is a sum.
"""

from __future__ import annotations

import jax.numpy as jnp

# -log(1 - p) is capped here in the exponents: exp(-100) is 0 in float32 and float64
# alike for every use, and the cap keeps products like m * 0 finite.
MAX_NEG_LOG = 100.0


def marking_probability(queue, kmin, kmax, pmax):
    """RED/ECN marking probability of an egress queue (bytes): 0, linear to pmax, then 1."""
    ramp = pmax * (queue - kmin) / (kmax - kmin)
    return jnp.where(queue <= kmin, 0.0, jnp.where(queue <= kmax, ramp, 1.0))


def log_no_mark(p):
    """``log(1 - p)`` clipped to ``-MAX_NEG_LOG`` (finite at p = 1, and so is its gradient:
    the log is never evaluated at 1, where its derivative would be infinite)."""
    below = p < 1.0
    safe = jnp.where(below, p, 0.0)
    return jnp.maximum(jnp.where(below, jnp.log1p(-safe), -MAX_NEG_LOG), -MAX_NEG_LOG)


__all__ = ["MAX_NEG_LOG", "log_no_mark", "marking_probability"]
