"""SIGINT/SIGTERM for the commands: stop at a safe point, never lose the signal.

The handler records the signal and raises :class:`Interrupted` (a ``KeyboardInterrupt``)
in the main thread. Python runs it between bytecodes, never inside XLA's compiler, so the
exception unwinds through ``finally`` blocks and temporary output files are removed.

When the handler happens to run inside a callback whose exceptions Python cannot propagate
(JAX's garbage-collection callback, a ``__del__``), the exception would be printed as
"Exception ignored in ..." and lost: a hook for such unraisable exceptions drops ours
silently and raises it again a millisecond later (SIGALRM), back in the interrupted code.
A signal that arrives during an import is raised once the import has finished: raised
inside the loading of a native extension that calls back into Python, it would abort the
process instead. Library code that swallows ``KeyboardInterrupt`` (a bare ``except:``)
cannot lose it either: :func:`check` raises again at the commands' next safe point (an
output finished, the report about to be printed).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from fabricflow.atomic import interrupts_held

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []  # signal numbers seen since handling() began; [] = none
_reported: list[bool] = []  # [True] once the command printed its --json object


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        self.signum = signum
        self.args_namespace: object = None  # the argparse namespace, set by the CLI
        super().__init__(signal.Signals(signum).name)


RETRY_S = 0.01  # how soon a deferred interrupt is raised again (SIGALRM)
_IMPORT_FRAMES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import. A native extension that is being loaded
    (jaxlib's MLIR modules) calls back into Python: an exception raised there reaches C++,
    which aborts the process (``terminate called after throwing ...``)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FRAMES:
            return True
        frame = frame.f_back
    return False


def _deferred(frame) -> bool:
    """Whether to raise a little later: inside an import, or while a step holds interrupts
    (a finished file renamed into place and recorded, a worker process started)."""
    return interrupts_held() or _importing(frame)


def _handler(signum, frame):
    _received.append(signum)
    if _deferred(frame):  # raise once that is done (SIGALRM, see _again)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise Interrupted(signum)


def _again(signum, frame):
    """SIGALRM after a swallowed or deferred interrupt: raise it again (not inside an
    import: then a little later)."""
    if not _received:
        return
    if _deferred(frame):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise Interrupted(_received[0])


def received() -> int | None:
    """The first signal recorded since :func:`handling` began, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise :class:`Interrupted` if a signal arrived (and was swallowed) earlier."""
    if _received:
        raise Interrupted(_received[0])


def mark_reported() -> None:
    """The command's one JSON object is out: an interrupt now must not print another."""
    _reported[:] = [True]


def reported() -> bool:
    return bool(_reported)


def ignore() -> None:
    """Ignore further signals while the interrupt is being reported (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number in (*SIGNALS, signal.SIGALRM):
            signal.signal(number, signal.SIG_IGN)


def _unraisable(hook):
    """A ``sys.unraisablehook`` that re-sends our swallowed signal instead of printing it."""

    def unraisable(info) -> None:
        if isinstance(info.exc_value, Interrupted):
            # raise it again in 1 ms, from SIGALRM, by when this callback has returned
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        hook(info)

    return unraisable


@contextlib.contextmanager
def handling():
    """Install the handler for the block (main thread only), restoring the previous ones."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    _reported.clear()
    previous = {number: signal.getsignal(number) for number in (*SIGNALS, signal.SIGALRM)}
    previous_hook = sys.unraisablehook
    for number in SIGNALS:
        signal.signal(number, _handler)
    signal.signal(signal.SIGALRM, _again)
    sys.unraisablehook = _unraisable(previous_hook)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, action in previous.items():
            signal.signal(number, action if action is not None else signal.SIG_DFL)
        sys.unraisablehook = previous_hook
