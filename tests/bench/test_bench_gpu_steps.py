"""bench/frameworks/bench_gpu_steps.py: the H100 measurements it reads are whole and its numbers agree with
each other and with docs/VALIDATION.md ("One H100"), so the table there is today's model's."""

from __future__ import annotations

import re

import pytest

from tests.support.bench import load_bench
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_gpu_steps")


@pytest.fixture(scope="module")
def rows(bench):
    return bench.results()


def test_every_measured_row_is_whole_and_every_twin_is_predicted(rows):
    assert len(rows) == 14
    for r in rows:
        assert r["measured_s"] > 0 and r["peak_memory_bytes"] > 0 and r["runs_s"]
        assert max(r["runs_s"]) / min(r["runs_s"]) < 1.01  # sessions agreed
        if r["group"] == "no twin":
            assert "predicted_s" not in r
        else:
            assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)


def test_the_kernel_classes_split_each_step_without_losing_time(bench):
    import json  # noqa: PLC0415

    measured = {r["name"]: sum(k[2] for k in r["kernels"])
                for r in json.loads(bench.KERNELS.read_text())["rows"] if "kernels" in r}
    table = bench.kernel_table()
    assert set(table) == set(measured) and len(table) == 4
    for name, classes in table.items():
        assert sum(classes.values()) == pytest.approx(measured[name])


def test_the_docs_table_is_todays_prediction(rows):
    text = (ROOT / "docs" / "VALIDATION.md").read_text()
    section = text[text.index("## One H100"):]
    found = re.findall(r"^\| (\S+), batch (\d+), (\w+), \w+ \| (fused|eager)[^|]*\| ([\d.]+) ms \| ([\d.]+) ms \| "
                       r"([+-][\d.]+)% \|", section, flags=re.M)
    assert len(found) == 13
    by_key = {(r["network"], r["batch"], r["precision"], r["group"].split()[1]): r
              for r in rows if r["group"] != "no twin"}
    for net, batch, precision, impl, measured, predicted, error in found:
        r = by_key[(net, int(batch), precision, impl)]
        assert float(measured) == pytest.approx(r["measured_s"] * 1e3, abs=0.06)
        assert float(predicted) == pytest.approx(r["predicted_s"] * 1e3, abs=0.06)
        assert float(error) == pytest.approx(r["error"] * 100, abs=0.06)
