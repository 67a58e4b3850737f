"""The command's persistent JAX compilation cache (a user cache folder, opt-out by env).

A run of ``fabricflow`` spends most of a small job compiling its jitted kernels; with
the persistent cache the second run of a command loads them from disk instead. The
settings go through JAX's environment variables, read when JAX is first imported, so
that commands which never touch JAX (``--help``, ``presets``) still do not import it.

* folder: ``$FABRICFLOW_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/fabricflow/jax``, else
  ``~/.cache/fabricflow/jax``;
* opt out: ``FABRICFLOW_NO_JAX_CACHE=1``; a ``JAX_COMPILATION_CACHE_DIR`` already set by
  the user is left as it is.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import MutableMapping


def cache_folder(env: MutableMapping[str, str] | None = None) -> str:
    """The folder the command caches compiled kernels in (see module docs)."""
    env = os.environ if env is None else env
    if env.get("FABRICFLOW_JAX_CACHE_DIR"):
        return env["FABRICFLOW_JAX_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fabricflow", "jax")


def enable_persistent_cache(env: MutableMapping[str, str] | None = None) -> str | None:
    """Point JAX's persistent compilation cache at :func:`cache_folder`; return it.

    Returns None (and changes nothing) when opted out, or when JAX is already imported
    (its configuration is then the caller's). Every kernel is cached, however short its
    compile (JAX's default skips compiles under a second, which is most of them here).
    """
    env = os.environ if env is None else env
    if env.get("FABRICFLOW_NO_JAX_CACHE", "").strip() not in ("", "0"):
        return None
    if "jax" in sys.modules:
        return None
    folder = env.setdefault("JAX_COMPILATION_CACHE_DIR", cache_folder(env))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return folder


_library_lock = threading.Lock()
_library_configured = False


def ensure_persistent_cache() -> None:
    """The same cache for library calls (the solvers call this before their first JAX
    use): before JAX is imported, :func:`enable_persistent_cache`; once it is, the cache
    folder is set through ``jax.config`` unless the user configured one or opted out.
    Once per process; a folder that cannot be created leaves the cache off."""
    global _library_configured
    with _library_lock:
        if _library_configured:
            return
        _library_configured = True
        if "jax" not in sys.modules:
            enable_persistent_cache()
            return
        if os.environ.get("FABRICFLOW_NO_JAX_CACHE", "").strip() not in ("", "0"):
            return
        import jax  # already imported: this only reads its configuration

        if getattr(jax.config, "jax_compilation_cache_dir", None):
            return  # the user's own setting (or the command line's) wins
        folder = cache_folder()
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            return
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
