"""DCQCN fixed point and linear stability at one bottleneck, from the model itself.

Both use :func:`~fabricflow.solve.cc.dcqcn.dcqcn_derivatives` (the function the
integrator steps), evaluated in float64 inside a scoped ``jax.enable_x64`` so the
global JAX configuration is left untouched.

* :func:`fixed_point`: N identical flows on a link of capacity C. At rest R_C = C/N and
  alpha = 1 - (1-p)^(tau' R_C); eliminating R_T between dR_T/dt = 0 and dR_C/dt = 0
  gives a^2 alpha / ((b + d)(c + e)) = tau^2 R_AI R_C (docs/references.md §2), solved for p by
  bracketing; then q = Kmin + (p / Pmax)(Kmax - Kmin). Paper defaults, 40 Gb/s, N = 2:
  p = 7.77e-4, q = 20.2 KB, alpha = 0.101.
* :func:`linear_stability`: the symmetric mode (all flows in phase) of the delay system
  x' = A0 x(t) + A1 x(t - tau*), x = (R_C, R_T, alpha, q), linearised at the fixed point,
  discretised exactly as the simulator steps it (Euler step dt, delay k = tau*/dt steps).
  The spectral radius of its companion matrix (size 4 (k + 1)) says whether small
  perturbations grow (> 1: the simulator settles into a sustained oscillation, a limit
  cycle bounded by the queue hitting 0 and the rate limits) or decay (< 1). The CoNEXT'16
  phase-margin analysis reaches the same kind of verdict from the continuous model.

Documented case (the stability tests): 40 Gb/s, paper defaults, N = 2: stable
at 4 us feedback delay, unstable at 200 us; the simulator's queue settles in the first
case and swings over tens of KB, down to empty, in the second.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fabricflow.errors import SpecError
from fabricflow.solve.cc.dcqcn import DCQCNParams, dcqcn_derivatives
from fabricflow.solve.cc.ecn import marking_probability


def _params64(params: DCQCNParams) -> DCQCNParams:
    return jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), params)


def fixed_point(capacity: float, num_flows: int, params: DCQCNParams | None = None) -> dict:
    """Steady state of ``num_flows`` DCQCN flows sharing one link (float64).

    Args:
        capacity: bottleneck capacity, bytes/s.
        num_flows: N >= 1 identical flows (each with line rate >= C/N).
        params: DCQCN parameters (default ``paper``).

    Returns:
        dict with ``p`` (marking probability), ``queue_bytes``, ``alpha``, ``rate_Bps``
        (= C/N), ``target_rate_Bps``.

    Raises:
        SpecError: the fixed point needs a marking probability above Pmax (queue above
        Kmax), which the RED ramp cannot give.
    """
    from scipy.optimize import brentq  # lazily: importing the solvers must not pull scipy

    params = params or DCQCNParams()
    if num_flows < 1 or capacity <= 0:
        raise SpecError("num_flows", "need num_flows >= 1 and capacity > 0")
    rate = capacity / num_flows
    with jax.enable_x64(True):
        p64 = _params64(params)

        def residual(log_p: float) -> float:
            return _rates_at(rate, float(np.exp(log_p)), p64)

        low, high = np.log(1e-12), np.log(float(params.pmax))
        if residual(high) > 0:
            raise SpecError(
                "params",
                f"no fixed point on the RED ramp: {num_flows} flows need "
                f"p > pmax = {params.pmax}; raise pmax or kmax",
            )
        log_p = brentq(residual, low, high, xtol=1e-14, rtol=1e-12)
        p = float(np.exp(log_p))
        _, target, alpha = _rates_at(rate, p, p64, full=True)
    queue = params.kmin + p / params.pmax * (params.kmax - params.kmin)
    return {
        "p": p,
        "queue_bytes": float(queue),
        "alpha": alpha,
        "rate_Bps": rate,
        "target_rate_Bps": target,
    }


def _rates_at(rate: float, p: float, p64, full: bool = False):
    """d R_C/dt at R_C = R' = rate with R_T, alpha at their rest values for marking p."""
    log_keep = jnp.log1p(-jnp.asarray(p, jnp.float64))
    alpha = -jnp.expm1(log_keep * p64.tau_prime * rate / p64.packet_bytes)
    rc = jnp.asarray(rate, jnp.float64)
    # R_T at rest: dR_T/dt = 0 with R_T - R_C = tau R_AI (R'c + R'e) / a.
    _, d_rt0, _ = dcqcn_derivatives(rc, rc, alpha, log_keep, rc, p64)
    a = -jnp.expm1(log_keep * p64.tau * rate / p64.packet_bytes)
    target = rc + d_rt0 * p64.tau / a
    d_rc, _, _ = dcqcn_derivatives(rc, target, alpha, log_keep, rc, p64)
    if full:
        return float(d_rc), float(target), float(alpha)
    return float(d_rc)


def linear_stability(
    capacity: float,
    num_flows: int,
    delay: float,
    params: DCQCNParams | None = None,
    dt: float = 1e-6,
) -> dict:
    """Spectral radius of the linearised, Euler-discretised symmetric DCQCN loop.

    Args:
        capacity: bottleneck capacity, bytes/s. num_flows: N identical flows.
        delay: feedback delay tau*, s (path latency + extra CNP delay).
        params: DCQCN parameters (default ``paper``). dt: the simulator's step, s.

    Returns:
        dict with ``spectral_radius``, ``growth_rate_per_s`` (log(radius)/dt),
        ``oscillation_hz`` (frequency of the dominant mode), ``stable`` (radius < 1) and
        the ``fixed_point``.
    """
    params = params or DCQCNParams()
    steps = max(1, int(round(delay / dt)))
    if steps > 5000:
        raise SpecError(
            "delay",
            f"delay/dt = {steps} steps is too long for the dense analysis "
            "(limit 5000); use a larger dt",
        )
    fp = fixed_point(capacity, num_flows, params)
    with jax.enable_x64(True):
        p64 = _params64(params)

        def rhs(current, delayed):
            rc, rt, alpha, queue = current
            rc_d, queue_d = delayed[0], delayed[3]
            p = marking_probability(queue_d, p64.kmin, p64.kmax, p64.pmax)
            d_rc, d_rt, d_alpha = dcqcn_derivatives(rc, rt, alpha, jnp.log1p(-p), rc_d, p64)
            d_q = num_flows * rc - capacity
            return jnp.stack([d_rc, d_rt, d_alpha, d_q])

        x0 = jnp.asarray([fp["rate_Bps"], fp["target_rate_Bps"], fp["alpha"], fp["queue_bytes"]])
        # Scale to O(1) units (rates / C, queue / Kmax) so the eigen-solve is well conditioned.
        scale = jnp.asarray([capacity, capacity, 1.0, float(params.kmax)])
        a0 = np.asarray(jax.jacfwd(lambda x: rhs(x * scale, x0) / scale)(x0 / scale))
        a1 = np.asarray(jax.jacfwd(lambda x: rhs(x0, x * scale) / scale)(x0 / scale))
    size = 4 * (steps + 1)
    companion = np.zeros((size, size))
    companion[:4, :4] = np.eye(4) + dt * a0
    companion[:4, -4:] += dt * a1
    companion[4:, :-4] = np.eye(size - 4)
    eigenvalues = np.linalg.eigvals(companion)
    dominant = eigenvalues[np.argmax(np.abs(eigenvalues))]
    radius = float(np.abs(dominant))
    return {
        "spectral_radius": radius,
        "growth_rate_per_s": float(np.log(radius) / dt),
        "oscillation_hz": float(abs(np.angle(dominant)) / (2 * np.pi * dt)),
        "stable": radius < 1.0,
        "delay_steps": steps,
        "fixed_point": fp,
    }


# The names exported as ff.dcqcn_fixed_point / ff.dcqcn_linear_stability.
dcqcn_fixed_point = fixed_point
dcqcn_linear_stability = linear_stability

__all__ = ["dcqcn_fixed_point", "dcqcn_linear_stability", "fixed_point", "linear_stability"]
