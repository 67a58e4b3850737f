"""Atomic output files: a file appears complete under its name, or not at all.

Every file fabricflow writes (figures, netCDF datasets, JSON summaries) goes through
:func:`atomic_path`: the writer fills a temporary file in the destination folder (created
when missing), which is renamed over the final name only after the writer returned. A
crash, Ctrl-C or full disk leaves no truncated file behind, and a failure to write becomes
an :class:`OutputError` that names the path and the reason instead of a raw ``OSError``.

Inside :func:`recording`, every file renamed into place is appended to a list at once
(an interrupt waits for the rename and the append: :func:`interrupts_held`), so that an
interrupted command can say exactly which of its files are whole on disk.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import tempfile
from collections.abc import Iterator

from fabricflow.errors import OutputError

_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "the path is a folder",
    errno.ENOENT: "the folder does not exist",
}

# the list that receives each file renamed into place (None: nobody is recording)
_WRITTEN: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "fabricflow_written", default=None
)


def describe_os_error(error: OSError) -> str:
    """A short human reason for an ``OSError`` (``"the disk is full"``)."""
    return _REASONS.get(error.errno or 0, error.strerror or str(error))


def unwritable_reason(path: str | os.PathLike) -> str | None:
    """Why the existing folder ``path`` cannot take new files, or None when it can.

    A read-only mount says so (``os.access`` alone reports it as a missing permission).
    """
    if os.access(path, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return _REASONS[errno.EROFS]
    return _REASONS[errno.EACCES]


def ensure_folder(path: str | os.PathLike) -> str:
    """Create the output folder ``path`` (and parents) or raise :class:`OutputError`."""
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OutputError(
            f"cannot create output folder {path!r}: {describe_os_error(error)}"
        ) from None
    reason = unwritable_reason(path)
    if reason is not None:
        raise OutputError(f"cannot write into output folder {path!r}: {reason}")
    return path


@contextlib.contextmanager
def recording(into: list) -> Iterator[list]:
    """Append to ``into`` the path of every file :func:`atomic_path` completes in the block.

    Example::

        written = []
        with recording(written):
            save_figure(fig, "out/a.png")
        written  # ["out/a.png"]
    """
    token = _WRITTEN.set(into)
    try:
        yield into
    finally:
        _WRITTEN.reset(token)


_held = [0]  # > 0 while a step that an interrupt must wait for runs (see interrupts_held())


def interrupts_held() -> bool:
    """Whether a step that an interrupt must not cut runs right now: a finished file being
    renamed into place and recorded (a file whole on disk is always in the record of
    :func:`recording`), or a worker process being started (cut, the child would die on its
    half-sent start-up data with a traceback). The commands' signal handler waits for the
    end of it before it raises."""
    return _held[0] > 0


@contextlib.contextmanager
def holding_interrupts() -> Iterator[None]:
    """A short step that the commands' interrupt waits for (see :func:`interrupts_held`)."""
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1


@contextlib.contextmanager
def _renaming_into_place(path: str) -> Iterator[None]:
    """The rename of the finished ``path`` and its record: interrupts wait for both."""
    with holding_interrupts():
        yield


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it to ``path`` if the block succeeds.

    The folder of ``path`` is created when missing.

    Example::

        with atomic_path("out/dcqcn.nc") as tmp:
            dataset.to_netcdf(tmp)

    Raises:
        OutputError: the folder cannot take the file (read-only, full disk, missing, ...).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    if not os.path.isdir(folder):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as error:
            raise OutputError(
                f"cannot write {path!r}: cannot create its folder: {describe_os_error(error)}"
            ) from None
    try:
        handle, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder)
        os.close(handle)
        # mkstemp creates 0600; give the file the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except OSError as error:
        raise OutputError(f"cannot write {path!r}: {describe_os_error(error)}") from None
    try:
        yield tmp
        with _renaming_into_place(path):
            os.replace(tmp, path)
            written = _WRITTEN.get()
            if written is not None and path not in written:
                written.append(path)
    except OSError as error:
        raise OutputError(f"cannot write {path!r}: {describe_os_error(error)}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
