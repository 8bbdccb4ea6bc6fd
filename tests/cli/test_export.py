"""`dnnplan export PLAN --to megatron`: the launch command printed or written, its JSON, and every
mistake (a framework not yet exported, a plan Megatron cannot run, a missing plan) one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from tests.support.cli_errors import one_error_line
from tests.support.executor_plans import pipelined_plan, predicted_plan, write_uniform_plan

runner = CliRunner()


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    return {"tensor": predicted_plan(folder, "tiny-gqa", 4, tensor=2),
            "pipeline": pipelined_plan(folder, 4, 2, 2, "1f1b"),
            "cnn": write_uniform_plan(folder, "lenet5", 2, 8, "data", machine="dgx-a100")}


def test_prints_a_shell_ready_command_one_flag_a_line(plans):
    result = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("# dnnplan: predicted step ") and lines[0].endswith(" s on 4 devices of dgx-a100")
    launcher = next(i for i, line in enumerate(lines) if line.startswith("torchrun "))
    assert lines[launcher].endswith("pretrain_gpt.py \\")
    flag_lines = lines[launcher + 1:]
    assert all(line.lstrip().startswith("--") for line in flag_lines)
    assert all(line.endswith(" \\") for line in flag_lines[:-1]) and not flag_lines[-1].endswith("\\")
    assert "    --tensor-model-parallel-size 2 \\" in flag_lines
    assert "    --num-query-groups 2 \\" in flag_lines


def test_a_pipelined_plan(plans):
    result = runner.invoke(app, ["export", plans["pipeline"], "--to", "megatron", "--json"])
    assert result.exit_code == 0, result.output
    args = json.loads(result.output)["args"]
    assert args[args.index("--pipeline-model-parallel-size") + 1] == "2"


def test_out_writes_the_command_and_json_gives_the_arguments(plans, tmp_path):
    out = tmp_path / "launch.sh"
    printed = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron"]).output
    written = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text() == printed and f"wrote {out}" in written.output
    again = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--out", str(out)])
    assert "already exists" in one_error_line(again)
    got = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--json"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.output)
    assert data["framework"] == "megatron" and data["args"][:2] == ["--tensor-model-parallel-size", "2"]
    assert all(f"    {a}" in printed for a in data["args"] if a.startswith("--"))


@pytest.mark.parametrize("to, says", [("deepspeed", "not yet: megatron only"),
                                      ("torchtitan", "not yet: megatron only"), ("nemo", "unknown --to")])
def test_other_frameworks_are_refused_in_one_line(plans, to, says):
    assert says in one_error_line(runner.invoke(app, ["export", plans["tensor"], "--to", to]))


def test_a_plan_megatron_cannot_run_names_the_file_and_layer(plans):
    line = one_error_line(runner.invoke(app, ["export", plans["cnn"], "--to", "megatron"]))
    assert plans["cnn"].split("/")[-1] in line and "layer 'conv1'" in line


def test_a_missing_plan_is_one_line(tmp_path):
    assert "no such plan file" in one_error_line(runner.invoke(app, ["export", str(tmp_path / "nope.yaml"),
                                                                      "--to", "megatron"]))


def test_help_teaches():
    result = runner.invoke(app, ["export", "--help"])
    assert result.exit_code == 0
    assert "Megatron-LM" in result.output and "--to" in result.output and "dnnplan export plan.yaml --to megatron" in result.output
