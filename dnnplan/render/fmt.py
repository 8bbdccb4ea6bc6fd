"""Human formatting of SI quantities for tables (the core keeps SI units; humans get these)."""

from __future__ import annotations

from networks.durations import seconds  # noqa: F401  (the tables' durations: three significant digits)


def count(x: float) -> str:
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def nbytes(x: float) -> str:
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20),
                        ("KiB", 2**10)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B"


def shape(s) -> str:
    return "×".join(str(d) for d in s) if s else "scalar"


def many(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 stage", "4 micro-batches"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n} {noun}s"
