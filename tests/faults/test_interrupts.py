"""Interrupts (SIGINT, SIGTERM, kill -9) at every phase of the commands that write files:
a command stops cleanly, prints one JSON object that lists exactly the files whole on disk,
and leaves no partial file under a final name."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from fabricflow.commands import _interrupt


def test_a_signal_during_an_import_is_raised_once_the_import_is_done(tmp_path, monkeypatch):
    # jaxlib's native modules call back into Python while they load: an exception raised
    # there aborted the process ("terminate called after throwing ... python_error")
    (tmp_path / "slow_import.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.3)\n"
        "LOADED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with _interrupt.handling():
        with pytest.raises(_interrupt.Interrupted) as caught:
            import slow_import  # noqa: F401

            time.sleep(5)  # the deferred interrupt arrives here, not inside the import
    assert caught.value.signum == signal.SIGTERM
    assert sys.modules["slow_import"].LOADED  # the module loaded whole
