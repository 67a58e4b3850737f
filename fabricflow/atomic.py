"""Atomic output files: a file appears complete under its name, or not at all.

Every file fabricflow writes (figures, netCDF datasets, JSON summaries) goes through
:func:`atomic_path`: the writer fills a temporary file in the destination folder, which is
renamed over the final name only after the writer returned. A crash, Ctrl-C or full disk
leaves no truncated file behind, and a failure to write becomes an :class:`OutputError`
that names the path and the reason instead of a raw ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator

from .errors import OutputError

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


def describe_os_error(error: OSError) -> str:
    """A short human reason for an ``OSError`` (``"the disk is full"``)."""
    return _REASONS.get(error.errno or 0, error.strerror or str(error))


def ensure_folder(path: str | os.PathLike) -> str:
    """Create the output folder ``path`` (and parents) or raise :class:`OutputError`."""
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OutputError(
            f"cannot create output folder {path!r}: {describe_os_error(error)}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into output folder {path!r}: permission denied")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it to ``path`` if the block succeeds.

    Example::

        with atomic_path("out/dcqcn.nc") as tmp:
            dataset.to_netcdf(tmp)

    Raises:
        OutputError: the folder cannot take the file (read-only, full disk, missing, ...).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
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
        os.replace(tmp, path)
    except OSError as error:
        raise OutputError(f"cannot write {path!r}: {describe_os_error(error)}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
