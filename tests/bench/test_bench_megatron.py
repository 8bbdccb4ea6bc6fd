"""bench/published/bench_megatron.py: the published Megatron-LM and DeepSpeed rows (Narayanan et al., Korthikanti
et al.) cite their tables and hold the documented error, the ZeRO-3 rows are priced as DeepSpeed ran
them, and a pipelined, recomputed row's calibration terms reprice it as predicting it again."""

from __future__ import annotations

import pytest

from costmodel.machine.loading import load_machine

from tests.support.bench import load_bench


def _bench():
    return load_bench("bench_megatron")


def test_published_megatron_rows_cite_their_table_and_hold_the_documented_error():
    """bench/published/bench_megatron.py on the rows that predict in a few seconds (docs/VALIDATION.md holds
    all 30): at most half of the rows calibrate (the ZeRO-3 ones never), each quick row within 20%
    and the held-out ones within 10% on average; the published step of a Narayanan row is its
    equation (3) FLOPs over its TFLOP/s."""
    bench = _bench()
    rows = bench.load_rows()
    assert len(rows) == 30 and all("Table" in r["source"] and "et al." in r["source"] for r in rows)
    assert 2 * sum(r["set"] == "calibration" for r in rows) <= len(rows)
    assert all(r["set"] == "held-out" for r in rows if r["config"].get("zero"))
    first = rows[0]  # 1.7B on 32 GPUs at 137 TFLOP/s
    assert bench.published_s(first) == pytest.approx(
        96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304)) / (137e12 * 32))
    quick = [r for r in rows if r["config"]["gpus"] <= 256 and not r["config"].get("zero")]
    results = bench.run(quick)
    assert len(results) == 8
    assert all(abs(r["error"]) < 0.20 for r in results), results
    held = [abs(r["error"]) for r in results if r["set"] == "held-out"]
    assert len(held) >= 3 and sum(held) / len(held) < 0.10


def test_published_zero3_rows_are_priced_as_deepspeed_ran_them():
    """Narayanan's Table 2 ZeRO-3 rows of GPT-3 175B (DeepSpeed, costmodel.frameworks.deepspeed): each within
    25% of its published step, and the step not shrinking from 768 to 1536 GPUs, as published."""
    bench = _bench()
    rows = [r for r in bench.load_rows() if r["config"].get("zero") and r["model"]["layers"] == 96]
    results = {row["config"]["gpus"]: r for row, r in zip(rows, bench.run(rows), strict=True)}
    assert sorted(results) == [384, 768, 1536]
    assert all(abs(r["error"]) < 0.25 for r in results.values()), results
    assert results[1536]["predicted_s"] > 0.9 * results[768]["predicted_s"]
    assert all(r["memory_peak_gib"] < 80 for r in results.values())  # the published runs fit 80 GB


def test_pipeline_terms_reprice_a_row_as_predicting_it_again():
    """The calibration's terms of a pipelined, recomputed row give the step predicted afresh under
    other efficiencies (every kernel run, the recomputed forward included, is one recorded call)."""
    from costmodel.compute.calibration import step_s, with_efficiencies
    from costmodel.machine.model import EFFICIENCY_CLASSES
    bench = _bench()
    row = next(r for r in bench.load_rows() if r["name"] == "korthikanti-t5-175b-full")
    machine = load_machine(bench.MACHINE)
    terms = bench.terms_of(row, machine)
    other = {**{k: machine.device.efficiency_of(k) for k in EFFICIENCY_CLASSES}, "tensor_16bit": 0.5, "memory": 0.9}
    again = bench.predict_row(row, with_efficiencies(machine, other)).step_s
    assert step_s(terms, other) == pytest.approx(again, rel=1e-9)
    assert again != pytest.approx(bench.predict_row(row, machine).step_s, rel=1e-3)
