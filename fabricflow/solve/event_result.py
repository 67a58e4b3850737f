"""The outcome of the completion engine's event loop, shared by both backends
(:func:`fabricflow.solve.completion_loop.numpy_events` and the jitted loop of
:mod:`fabricflow.solve.completion_jax`), below both."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class EventResult(NamedTuple):
    """Outcome of an event loop (numpy arrays, float64 times in seconds).

    ``elapsed`` ``[F]`` arrival-to-finish seconds (``inf``: not finished, because it
    never can or the loop stopped first); ``remaining`` ``[F]`` bytes left when the loop stopped (0 when
    finished); ``clock`` seconds from the earliest start to the stop; ``events``,
    ``rounds`` (max-min rounds over all solves), ``status`` (a :class:`~fabricflow.solve.status.SolverStatus`)."""

    elapsed: np.ndarray
    remaining: np.ndarray
    clock: float
    events: int
    rounds: int
    status: int
