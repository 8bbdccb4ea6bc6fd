"""Checks of flag values that typer's types cannot express: every number within its plausible
range (finite; NaN is never in range), and flags that do nothing."""

from __future__ import annotations

from typing import Callable, TypeVar

from costmodel.compute.model import ComputeModel, OnDemand
from networks.errors import DnnplanError, short

N = TypeVar("N", int, float)


def within(flag: str, least: float, most: float, unit: str = "") -> Callable[[N | None], N | None]:
    """A typer callback refusing a value of ``flag`` outside ``[least, most]`` (NaN included) with
    one line naming the flag, the range and what was given."""
    def check(value: N | None) -> N | None:
        if value is None or least <= value <= most:
            return value
        words = f"from {least:g} to {most:g}{unit}"
        if isinstance(value, int) and least == 1:
            words = f"a whole number from 1 to {most:,.0f}"
        raise DnnplanError(f"{flag} must be {words}, got {short(value)}")
    return check


def refresh_warning(refresh: bool, compute: ComputeModel) -> str | None:
    """``--refresh-profile`` re-times this computer's on-demand cache only: the line saying so
    when the compute model is something else (a given table, the datasheet)."""
    if refresh and not (isinstance(compute, OnDemand) and compute.refresh):
        return ("--refresh-profile applies to machine `local` without --profile (this computer's profile "
                "cache); ignored")
    return None
