"""A duration in words a reader takes in at a glance: ``23.5 µs``, ``675.6 ms``, ``4.255 s`` (pure).

Every command's tables (``dnnplan.render.fmt.seconds``, three significant digits) and the planner's
sentences (four: two ZeRO stages' steps a few per mille apart stay apart) scale a duration into the
unit that keeps its leading digit at or above one, from seconds down to nanoseconds, never into an
exponent: a tiny network's step reads ``92.77 µs``, not ``9.277e-05 s``, and a long one ``12,345 s``.
"""

from __future__ import annotations

#: the units a duration is written in, largest first, each with its size in seconds
UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))


def seconds(x: float, digits: int = 3) -> str:
    """``x`` seconds with ``digits`` significant digits in the unit that fits (module docstring);
    ``0`` for nothing, the float's own words for an infinity or NaN."""
    if x == 0:
        return "0"
    if x != x or x in (float("inf"), float("-inf")):
        return f"{x} s"
    for unit, scale in UNITS:
        v = float(f"{x / scale:.{digits}g}")  # rounded first: 0.9999 s is "1 s", not "1e+03 ms"
        if abs(v) >= 1:
            return _digits(v, digits) + f" {unit}"
    return _digits(x / 1e-9, digits) + " ns"


def _digits(v: float, digits: int) -> str:
    """``v`` to ``digits`` significant digits, whole numbers of more digits than that as they are
    (``12,345``), never in an exponent."""
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"
