"""Checks of flag values that typer's types cannot express (positive counts, flags that do nothing)."""

from __future__ import annotations

from costmodel.compute import ComputeModel, OnDemand
from networks.errors import DnnplanError


def positive(name: str, value: int) -> int:
    """``value`` when it is at least 1, else the one-line error naming ``--name``."""
    if value < 1:
        raise DnnplanError(f"--{name} must be a positive integer, got {value}")
    return value


def at_least(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise DnnplanError(f"--{name} must be at least {minimum:g}, got {value:g}")


def refresh_warning(refresh: bool, compute: ComputeModel) -> str | None:
    """``--refresh-profile`` re-times this computer's on-demand cache only: the line saying so
    when the compute model is something else (a given table, the datasheet)."""
    if refresh and not (isinstance(compute, OnDemand) and compute.refresh):
        return ("--refresh-profile applies to machine `local` without --profile (this computer's profile "
                "cache); ignored")
    return None
