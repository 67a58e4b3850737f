"""``KEY=VALUE`` command-line items (``--fix``, ``--space``, ``--set``, ``--gpu-set``,
``--mtbf``, ``--predict``, ...) split the one way every command reads them.

A key given twice is refused rather than letting the last one win: two different values
contradict each other, and a repeated list (``--space tp=4 --space tp=8``) is ambiguous
(union or replacement?). The same value twice says nothing new and is accepted.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricflow.errors import SpecError


def key_values(
    items: Iterable[object] | None,
    flag: str,
    *,
    example: str = "KEY=VALUE",
    keys: Iterable[str] | None = None,
    lists: bool = False,
    key_name: str = "key",
) -> dict[str, str]:
    """``["tp=8", "zero=1"]`` as ``{"tp": "8", "zero": "1"}`` (keys stripped, values as
    written), in the order given.

    Args:
        items: the flag's items (None or empty: ``{}``).
        flag: the flag's name, for errors (``--fix``).
        example: what one item looks like, for the error on an item without ``=``.
        keys: the allowed keys, if the set is closed (an unknown key is refused with the
            closest ones).
        lists: the values are comma-separated lists (``--space tp=4,8``): a repeated key
            is refused with the joined list to give instead.
        key_name: what a key is, for the unknown-key error (``component``).

    Raises:
        SpecError: an item without ``=`` or with an empty key, an unknown key, or a key
            given twice with different values.
    """
    allowed = None if keys is None else list(keys)
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(flag, f"expected {example}, got {item!r}")
        if allowed is not None and key not in allowed:
            raise SpecError(
                flag, f"unknown {key_name} {key!r}; one of {allowed}", value=key, allowed=allowed
            )
        if key in out and out[key].strip() != value.strip():
            if lists:
                joined = ",".join(
                    dict.fromkeys(w.strip() for w in f"{out[key]},{value}".split(",") if w.strip())
                )
                raise SpecError(
                    f"{flag} {key}",
                    f"given twice ({out[key]!r} and {value!r}); give the key once with every "
                    f"value, e.g. {flag} {key}={joined}",
                )
            raise SpecError(
                f"{flag} {key}",
                f"given twice with different values ({out[key]!r} and {value!r}); give one",
            )
        out.setdefault(key, value)
    return out
