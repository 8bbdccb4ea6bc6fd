"""The shipped GPU machines' efficiencies are what bench/published/bench_published.py fits on its calibration
rows, and the held-out published trainings stay within the issue's bounds (deterministic
predictions from datasheets: no timing here)."""

from __future__ import annotations


import pytest

from costmodel.machine.loading import load_machine
from costmodel.machine.model import EFFICIENCY_CLASSES

from tests.support.bench import load_bench

CALIBRATED = ("dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx1-v100", "summit")
#: classes a machine file takes from a measurement on that machine in place of the fit (dgx-h100's
#: float32 GEMM: tests/bench/test_bench_conv_layers.py)
MEASURED = {"dgx-h100": ("cuda_cores",)}


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_published")


def test_at_most_half_of_the_rows_calibrate_and_every_row_cites_its_table(bench):
    rows = bench.load_rows()
    calib = [r for r in rows if r.set == "calibration"]
    assert len(rows) >= 8 and 2 * len(calib) <= len(rows)
    assert {r.set for r in rows} == {"calibration", "held-out"}
    for r in rows:
        assert "README" in r.source and "GPUs" in r.source and r.published > 0


def test_the_shipped_efficiencies_are_the_fit(bench):
    fitted = bench.calibrate(bench.load_rows())
    for name in CALIBRATED:
        device = load_machine(name).device
        classes = [k for k in EFFICIENCY_CLASSES if k not in MEASURED.get(name, ())]
        assert {k: device.efficiency_of(k) for k in classes} == pytest.approx({k: fitted[k] for k in classes},
                                                                              abs=1e-9), name


def test_the_machines_without_a_fit_of_their_own_carry_the_h100s_fractions():
    """dgx-h200 (the same GH100 chip), the Blackwell machines and the MI300X say they carry the H100's
    efficiencies: every class as dgx-h100 has it, its measured float32 GEMM included."""
    h100 = load_machine("dgx-h100").device
    for name in ("dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x"):
        device = load_machine(name).device
        assert {k: device.efficiency_of(k) for k in EFFICIENCY_CLASSES} == \
            {k: h100.efficiency_of(k) for k in EFFICIENCY_CLASSES}, name


def test_held_out_error_within_bounds(bench):
    results = bench.predict_rows(bench.load_rows())
    held = [abs(x["error"]) for x in results if x["set"] == "held-out"]
    assert len(held) >= 4
    assert sum(held) / len(held) < 0.15
    assert max(held) < 0.30


def test_deepbench_layers_are_priced_per_pass(bench):
    layers = bench.deepbench_layers()
    assert len(layers) == 2 * 32 * 3  # two sheets, 32 convolutions, three passes
    assert {x["sheet"] for x in layers} == {"fp32", "fp16"}
    assert all(x["predicted_s"] > 0 and x["measured_s"] > 0 for x in layers)
    # 16-bit tensor cores price every pass faster than float32 CUDA cores, as DeepBench measured
    by = {(x["row"], x["pass"], x["sheet"]): x for x in layers}
    for (row, pass_, sheet), x in by.items():
        if sheet == "fp16":
            assert x["predicted_s"] < by[(row, pass_, "fp32")]["predicted_s"]
