"""A plan file names its network spec and machine YAML relative to its own folder, so it reads back
from any working folder (planner.plan.file_refs)."""

from __future__ import annotations

import json
import shutil

import yaml
from typer.testing import CliRunner

from dnnplan.cli import app
from tests.support.paths import ASSETS, ROOT, ZOO

runner = CliRunner()


def _step(args: list[str]) -> float:
    got = runner.invoke(app, args + ["--json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)["step_s"]


def test_a_plan_of_files_reads_back_from_any_folder(tmp_path, monkeypatch):
    specs, plans, elsewhere = tmp_path / "specs", tmp_path / "plans", tmp_path / "elsewhere"
    for folder in (specs, plans, elsewhere):
        folder.mkdir()
    shutil.copy(ZOO / "lenet5.yaml", specs / "net.yaml")
    shutil.copy(ROOT / "costmodel" / "machine" / "dgx-a100.yaml", specs / "m.yaml")
    monkeypatch.chdir(tmp_path)
    planned = _step(["plan", "specs/net.yaml", "-p", "4", "--machine", "specs/m.yaml", "--out", "plans/p.yaml"])
    recorded = yaml.safe_load((plans / "p.yaml").read_text())
    assert (recorded["network"], recorded["machine"]) == ("../specs/net.yaml", "../specs/m.yaml")
    for folder, plan in ((elsewhere, str(plans / "p.yaml")), (plans, "p.yaml"), (tmp_path, "plans/p.yaml")):
        monkeypatch.chdir(folder)
        assert _step(["predict", plan]) == planned, folder
    # another net.yaml in the working folder is not the plan's
    shutil.copy(ZOO / "alexnet.yaml", elsewhere / "net.yaml")
    monkeypatch.chdir(elsewhere)
    assert _step(["predict", str(plans / "p.yaml")]) == planned


def test_a_plan_written_beside_its_spec_and_one_naming_the_working_folder_read_back(tmp_path, monkeypatch):
    shutil.copy(ZOO / "lenet5.yaml", tmp_path / "net.yaml")
    monkeypatch.chdir(tmp_path)
    planned = _step(["plan", "net.yaml", "-p", "2", "--out", "p.yaml"])
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["network"] == "./net.yaml"
    assert _step(["predict", "p.yaml"]) == planned
    # a plan that names a path from the folder it was made in (not from its own): read from there
    (tmp_path / "plans").mkdir()
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    (tmp_path / "plans" / "old.yaml").write_text(yaml.safe_dump({**data, "network": "net.yaml"}, sort_keys=False))
    assert _step(["predict", "plans/old.yaml"]) == planned
    # a zoo name stays a name
    _step(["plan", "lenet5", "-p", "2", "--out", "z.yaml"])
    assert yaml.safe_load((tmp_path / "z.yaml").read_text())["network"] == "lenet5"


def test_a_plan_of_a_hugging_face_folder_named_without_a_slash_reads_back_from_elsewhere(tmp_path, monkeypatch):
    """`dnnplan plan llamaish` (a folder holding a config.json, which the loader reads before a zoo
    name) records ./llamaish from the plan's folder, as it records a spec."""
    shutil.copytree(ASSETS / "hf" / "gpt2", tmp_path / "mygpt")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    planned = _step(["plan", "mygpt", "-p", "2", "--seq", "128", "--out", "p.yaml"])
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["network"] == "./mygpt"
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert _step(["predict", str(tmp_path / "p.yaml")]) == planned


def test_a_plan_written_under_any_name_reads_back_as_a_plan(tmp_path):
    """`plan -o p3.txt` writes YAML and says to predict it; predict reads it back as a plan, not as a
    network spec it then refuses."""
    out = tmp_path / "p3.txt"
    made = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "-o", str(out), "--json"])
    assert made.exit_code == 0, made.output
    again = runner.invoke(app, ["predict", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_s"] == json.loads(made.stdout)["step_s"]
