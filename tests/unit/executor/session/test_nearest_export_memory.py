"""`dnnplan export --nearest` (executor.session.export_nearest): a nearest plan that needs more memory
a device than the machine's, where the plan fits, is refused in one line, nothing written (a
configuration that cannot run is no launch)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from executor.session import export_nearest
from networks.errors import DnnplanError

GIB = 2 ** 30


@dataclass(frozen=True)
class _Plan:  # what nearest_export reads of a plan, and replaces
    name: str
    machine: str = "dgx-h100"
    step_s: float = 0.0
    memory_peak_bytes: int = 0


def _export(monkeypatch, original_gib: float, nearest_gib: float):
    plan, near = _Plan("original"), _Plan("nearest")
    monkeypatch.setattr(export_nearest, "nearest_plan", lambda p, n, f, m: SimpleNamespace(plan=near, changes=("x",)))
    memory = {"original": original_gib * GIB, "nearest": nearest_gib * GIB}
    monkeypatch.setattr(export_nearest, "priced",
                        lambda p, n: SimpleNamespace(step_s=1.0, memory_peak_bytes=memory[p.name]))
    return export_nearest.nearest_export(plan, None, "megatron")


def test_a_nearest_plan_over_the_devices_memory_is_refused_where_the_plan_fits(monkeypatch):
    with pytest.raises(DnnplanError) as err:
        _export(monkeypatch, 79.57, 291.78)
    text = str(err.value)
    assert "the nearest plan megatron runs needs 291.78 GiB a device, over dgx-h100's 79.65 GiB" in text
    assert "(the plan's: 79.57 GiB)" in text and "more devices" in (err.value.hint or "")


def test_a_nearest_plan_that_fits_or_a_plan_already_over_is_exported(monkeypatch):
    assert _export(monkeypatch, 60.0, 79.0).changes == ("x",)
    assert _export(monkeypatch, 90.0, 95.0).changes == ("x",)  # planned over the machine's memory (--memory)
