"""`dnnplan export --nearest` (executor.session.export_nearest): of the nearest plans weighed (one
layout on every layer each), the fastest that fits the device's memory is exported; where none fits
and the plan does, the refusal is one line naming the least any needs, nothing written (a
configuration that cannot run is no launch); a nearest plan the framework's file cannot state is
passed over for another."""

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


def _export(monkeypatch, original_gib: float, nearest: dict[str, tuple[float, float]], unwritten=(), kept=()):
    """``nearest``: each layout's nearest plan name -> (step in s, memory in GiB), in the order weighed;
    ``kept``: those whose nearest plan keeps the plan's own layout on every layer."""
    plan = _Plan("original")
    plans = {name: _Plan(name) for name in nearest}
    monkeypatch.setattr(export_nearest, "choices_weighed", lambda p, n, f: ((layout, None) for layout in nearest))
    monkeypatch.setattr(export_nearest, "recompute_counts", lambda p, n, f: (0, 0))  # no transformer layers
    monkeypatch.setattr(export_nearest, "nearest_plan", lambda p, n, f, m, layout, whole: SimpleNamespace(
        plan=plans[layout], changes=(layout,), relaid=layout not in kept))
    priced = {"original": (1.0, original_gib)} | nearest
    monkeypatch.setattr(export_nearest, "priced", lambda p, n: SimpleNamespace(
        step_s=priced[p.name][0], memory_peak_bytes=priced[p.name][1] * GIB))

    def writes(p):
        if p.name in unwritten:
            raise DnnplanError(f"{p.name} is not written")

    return export_nearest.nearest_export(plan, None, "megatron", writes)


def test_a_nearest_plan_over_the_devices_memory_is_refused_where_the_plan_fits(monkeypatch):
    with pytest.raises(DnnplanError) as err:
        _export(monkeypatch, 79.57, {"a": (1.0, 291.78)})
    text = str(err.value)
    assert "the nearest plan megatron runs needs 291.78 GiB a device, over dgx-h100's 79.65 GiB" in text
    assert "(the plan's: 79.57 GiB)" in text and "more devices" in (err.value.hint or "")


def test_where_no_layout_fits_the_least_memory_any_needs_is_named(monkeypatch):
    with pytest.raises(DnnplanError) as err:
        _export(monkeypatch, 79.57, {"a": (1.0, 291.78), "b": (2.0, 116.21)})
    assert "each of the 2 nearest plans megatron runs (a layout on every layer) needs at least 116.21 GiB" \
        in str(err.value)


def test_a_nearest_plan_that_fits_or_a_plan_already_over_is_exported(monkeypatch):
    assert _export(monkeypatch, 60.0, {"a": (1.0, 79.0)}).changes == ("a",)
    assert _export(monkeypatch, 90.0, {"a": (1.0, 95.0)}).changes == ("a",)  # planned over the memory (--memory)


def test_the_fastest_nearest_plan_that_fits_is_exported_with_its_own_prediction(monkeypatch):
    got = _export(monkeypatch, 78.9, {"most": (18.1, 116.2), "mlp": (15.0, 66.4), "slow": (16.0, 60.0)})
    assert got.plan.name == "mlp" and got.plan.step_s == 15.0 and got.plan.memory_peak_bytes == int(66.4 * GIB)
    assert got.changes[0] == "mlp" and got.changes[1].startswith("3 nearest plans weighed")
    assert got.nearest.step_s == 15.0 and got.original.step_s == 1.0


def test_a_nearest_plan_the_file_cannot_state_is_passed_over_and_alone_refused(monkeypatch):
    assert _export(monkeypatch, 60.0, {"a": (1.0, 50.0), "b": (2.0, 50.0)}, unwritten=("a",)).plan.name == "b"
    with pytest.raises(DnnplanError, match="a is not written"):
        _export(monkeypatch, 60.0, {"a": (1.0, 50.0)}, unwritten=("a",))


def test_a_plan_whose_own_layout_runs_keeps_it_though_another_is_faster(monkeypatch):
    """Only the plan's ZeRO stage changes (its layout every layer's): no other layout is weighed."""
    got = _export(monkeypatch, 60.0, {"own": (2.0, 50.0), "faster": (1.0, 50.0)}, kept=("own",))
    assert got.plan.name == "own" and got.changes == ("own",)


def test_the_fewest_whole_layers_that_fit_are_found_by_bisection():
    """Memory falls as more first layers of each chunk are recomputed whole: of 0 to 10, the least
    count that fits (here 4) is found pricing a few counts, not all eleven."""
    asked = []

    def weigh(layout, whole):
        asked.append(whole)
        return SimpleNamespace(), SimpleNamespace(memory_peak_bytes=100 - 10 * whole, step_s=1 + whole), layout

    got = export_nearest._fewest_whole(weigh, lambda m: m[1].memory_peak_bytes <= 60, "w", 10)
    assert got[1].step_s == 5 and len(asked) <= 6 and 4 in asked
    assert export_nearest._fewest_whole(weigh, lambda m: True, "w", 10)[1].step_s == 1  # none recomputed fits
    assert export_nearest._fewest_whole(weigh, lambda m: False, "w", 10)[1].step_s == 11  # nothing fits: every layer
