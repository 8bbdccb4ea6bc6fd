"""`dnnplan profile --host`: numpy's per-op dispatch timed here, printed and written as a framework
file fragment a framework file loads; torch where it is not installed, a network beside --host, and
no target without it, each one line."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from costmodel.frameworks.loading import load_framework
from dnnplan.cli import app

runner = CliRunner()


def test_numpy_prints_each_ops_cost_and_the_fragment():
    r = runner.invoke(app, ["profile", "--host", "--quick"])
    assert r.exit_code == 0, r.output
    for op in ("add", "matmul 1x1", "relu", "mean over the ops", "host:", "op_s:", "basis: measured"):
        assert op in r.output


def test_the_json_and_the_written_fragment_load_as_a_framework(tmp_path):
    out = tmp_path / "host.yaml"
    r = runner.invoke(app, ["profile", "--host", "--framework", "numpy", "--quick", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["framework"] == "numpy" and len(got["ops"]) == 5 and got["op_s"] > 0
    assert got["op_s"] == pytest.approx(sum(o["mean_s"] for o in got["ops"]) / 5)
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\nabout: numpy as timed here\n" + out.read_text())
    fw = load_framework(str(mine))
    assert fw.host.op_s.value == pytest.approx(got["op_s"], rel=5e-3) and fw.host.op_s.basis == "measured"
    again = runner.invoke(app, ["profile", "--host", "--quick", "--out", str(out)])
    assert again.exit_code == 2 and "exists" in again.output  # never replaced silently


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_torch_not_installed_is_one_line():
    r = runner.invoke(app, ["profile", "--host", "--framework", "torch"])
    assert r.exit_code == 2 and "torch is not installed" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, words", [(["profile", "lenet5", "--host"], "--host times a framework's dispatch"),
                                         (["profile"], "needs a network or a sweep"),
                                         (["profile", "--host", "--framework", "jax"], "unknown --framework jax")])
def test_a_mistake_is_one_line(args, words):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1


def test_the_kernels_flags_beside_host_and_framework_without_it_are_said_to_change_nothing():
    r = runner.invoke(app, ["profile", "--host", "--quick", "--threads", "2", "--json"])
    assert r.exit_code == 0 and "--threads changes nothing with --host" in r.output
    r = runner.invoke(app, ["profile", "gemm", "--sizes", "16", "--quick", "--framework", "numpy", "--json"])
    assert "--framework changes nothing without --host" in r.output
