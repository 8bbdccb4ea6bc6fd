"""--grad-fp32: under 16-bit weights, the gradients accumulated in a float32 buffer and reduced in
float32 (Megatron-LM's default under --bf16), priced in memory and on the wire, recorded in a plan
file, said to change nothing under float32 weights, refused by the exports that cannot write it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app

runner = CliRunner()
ARGS = ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "bf16", "--optimizer", "adam",
        "--json"]


def _predicted(extra: list[str]) -> dict:
    got = runner.invoke(app, ARGS + extra)
    assert got.exit_code == 0, got.output
    return json.loads(got.output)


@pytest.mark.parametrize("zero, share", [(0, 1), (1, 1), (2, 2), (3, 2)])
def test_float32_gradients_hold_twice_the_gradient_bytes(zero, share):
    """The gradient buffer doubles (held whole up to ZeRO-1, sharded over the 2 replicas from ZeRO-2 on);
    the weights, master weights and optimiser state do not move."""
    plain, wide = _predicted(["--zero", str(zero)]), _predicted(["--zero", str(zero), "--grad-fp32"])
    parts, parts_wide = plain["memory_parts_bytes"], wide["memory_parts_bytes"]
    assert parts_wide["grads"] == 2 * parts["grads"]
    assert {k: v for k, v in parts_wide.items() if k not in ("grads", "transient")} == \
        {k: v for k, v in parts.items() if k not in ("grads", "transient")}
    # 4 bytes a parameter (the bf16 weights' 2, held whole but under ZeRO-3), over the replicas from ZeRO-2 on
    params = parts["weights"] // 2 * (2 if zero == 3 else 1)
    assert parts_wide["grads"] == 4 * params // share
    assert wide["grad_fp32"] and not plain["grad_fp32"]


def test_float32_gradients_reduce_twice_the_bytes():
    """The data-parallel gradient reduction moves 4 bytes an element instead of 2: its time grows."""
    plain, wide = _predicted(["--zero", "0", "--overlap", "none"]), _predicted(["--zero", "0", "--overlap", "none",
                                                                               "--grad-fp32"])
    assert wide["grad_sync_s"] > plain["grad_sync_s"] and wide["step_s"] > plain["step_s"]
    assert wide["fwd_s"] == plain["fwd_s"] and wide["bwd_s"] == plain["bwd_s"]


def test_float32_gradients_under_float32_weights_change_nothing_and_say_so():
    got = runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "fp32",
                              "--grad-fp32", "--json"])
    plain = runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "fp32",
                                "--json"])
    assert got.exit_code == 0 and plain.exit_code == 0, got.output
    assert "--grad-fp32 changes nothing: under --precision fp32" in " ".join(got.stderr.split())
    assert json.loads(got.stdout)["memory_peak_bytes"] == json.loads(plain.stdout)["memory_peak_bytes"]


def test_a_plan_file_records_float32_gradients_and_megatron_reads_them_back(tmp_path):
    out, script = tmp_path / "plan.yaml", tmp_path / "run.sh"
    got = runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "bf16",
                              "--zero", "1", "--grad-fp32", "--out", str(out)])
    assert got.exit_code == 0, got.output
    assert "grad_fp32: true" in out.read_text()
    assert runner.invoke(app, ["export", str(out), "--to", "megatron", "--out", str(script)]).exit_code == 0
    assert "--grad-reduce-in-bf16" not in script.read_text()  # Megatron-LM's default under --bf16
    plan = json.loads(runner.invoke(app, ["predict", str(out), "--json"]).stdout)
    back = runner.invoke(app, ["predict", "--from", str(script), "--json"])
    assert back.exit_code == 0, back.output
    back = json.loads(back.stdout)
    assert back["layout"]["grad_fp32"] and (back["step_s"], back["memory_allocated_bytes"]) == \
        (plan["step_s"], plan["memory_peak_bytes"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(out.read_text().replace("grad_fp32: true", "grad_fp32: 7"))
    said = runner.invoke(app, ["predict", str(bad)])
    assert said.exit_code == 2 and "field 'grad_fp32': grad_fp32 takes true or false, got '7'" in \
        " ".join(said.output.split()), said.output
    said = runner.invoke(app, ["predict", str(out), "--no-grad-fp32"])
    assert said.exit_code == 2 and "--no-grad-fp32 differs from the plan's grad_fp32 true" in \
        " ".join(said.output.split()), said.output


def test_a_plan_in_the_weights_precision_exports_megatrons_bf16_reduction(tmp_path):
    out, script = tmp_path / "plan.yaml", tmp_path / "run.sh"
    assert runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "bf16",
                               "--zero", "1", "--out", str(out)]).exit_code == 0
    assert runner.invoke(app, ["export", str(out), "--to", "megatron", "--out", str(script)]).exit_code == 0
    assert "--grad-reduce-in-bf16" in script.read_text()
    back = json.loads(runner.invoke(app, ["predict", "--from", str(script), "--json"]).stdout)
    assert back["layout"]["grad_fp32"] is False


@pytest.mark.parametrize("to, says", [("torchtitan", "torchtitan keeps float32 weights and gradients"),
                                      ("deepspeed", "reduces them in the weights' precision")])
def test_exports_that_write_no_gradient_precision_refuse_float32_gradients(tmp_path, to, says):
    out = tmp_path / "plan.yaml"
    assert runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "bf16",
                               "--zero", "1", "--grad-fp32", "--out", str(out)]).exit_code == 0
    said = runner.invoke(app, ["export", str(out), "--to", to])
    text = " ".join(said.output.split())
    assert said.exit_code == 2 and "float32 gradients (--grad-fp32)" in text and says in text, said.output
    assert "re-plan without --grad-fp32" in text
