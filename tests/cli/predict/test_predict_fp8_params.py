"""--fp8-params: the transformer blocks' GEMM weights kept only in FP8 (Megatron-Core's
--fp8-param-gather), priced in memory, recorded in a plan file, said to change nothing without FP8."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dnnplan.cli import app

runner = CliRunner()
ARGS = ["predict", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--zero", "1", "--json"]


def _memory(extra: list[str]) -> dict:
    got = runner.invoke(app, ARGS + extra)
    assert got.exit_code == 0, got.output
    return json.loads(got.output)


def test_fp8_parameters_drop_the_16_bit_copy_of_the_fp8_weights():
    plain, fp8 = _memory(["--precision", "fp8"]), _memory(["--precision", "fp8", "--fp8-params"])
    parts, parts_fp8 = plain["memory_parts_bytes"], fp8["memory_parts_bytes"]
    assert parts_fp8["weights"] < parts["weights"] and parts_fp8["fp8"] < parts["fp8"]
    # ZeRO-1's parameter all-gather moves one byte an FP8 weight element, not two
    assert fp8["step_s"] < plain["step_s"] and fp8["fp8_params"] and not plain["fp8_params"]


def test_fp8_parameters_without_fp8_change_nothing_and_say_so():
    got = runner.invoke(app, ARGS[:-1] + ["--precision", "bf16", "--fp8-params"])
    assert got.exit_code == 0, got.output
    assert "--fp8-params changes nothing: no layer trains in FP8" in " ".join(got.output.split())


def test_a_plan_file_records_fp8_parameters(tmp_path):
    out = tmp_path / "plan.yaml"
    got = runner.invoke(app, ["plan", "tiny-llama", "-p", "2", "--machine", "dgx-h100", "--precision", "fp8",
                              "--fp8-params", "--zero", "1", "--time-limit", "20", "--out", str(out)])
    assert got.exit_code == 0, got.output
    assert "fp8_params: true" in out.read_text()
    predicted = runner.invoke(app, ["predict", str(out), "--json"])
    assert predicted.exit_code == 0, predicted.output


def test_a_plan_files_fp8_parameters_edited_or_contradicted_is_one_line_naming_the_switch(tmp_path):
    out = tmp_path / "plan.yaml"
    got = runner.invoke(app, ARGS[:-1] + ["--precision", "fp8", "--fp8-params", "--out", str(out)])
    assert got.exit_code == 0, got.output
    edited = tmp_path / "edited.yaml"
    edited.write_text("".join(line for line in out.read_text().splitlines(True) if not line.startswith("fp8_params")))
    said = runner.invoke(app, ["predict", str(edited)])
    assert said.exit_code == 2 and "field 'fp8_params': the plan was made with --fp8-params, and its 'fp8_params' " \
        "now says false" in " ".join(said.output.split()), said.output
    said = runner.invoke(app, ["predict", str(out), "--no-fp8-params"])
    assert said.exit_code == 2 and "--no-fp8-params differs from the plan's fp8_params true" in \
        " ".join(said.output.split()), said.output
