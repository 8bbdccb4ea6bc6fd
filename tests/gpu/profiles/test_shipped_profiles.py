"""The GPU tables shipped in profiler/profiles/, named CARD-PRECISION (measured on lent H100s and an
H200, docs/VALIDATION.md "GPU loop"): named by --profile, they plan without a GPU from the card's
measured kernels."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from profiler.tables.store import SHIPPED_DIR, read_table, resolve_table

runner = CliRunner()


@pytest.mark.parametrize("name", ["h100-tf32", "h100-bf16", "h200-tf32", "h200-bf16"])
def test_a_shipped_table_is_a_gpu_table_of_its_precision(name):
    table = read_table(name)
    fp = table.fingerprint
    card, precision = name.split("-")
    assert fp["backend"] == "cupy" and card.upper() in fp["device"] and fp["precision"] == precision
    assert fp["cudnn"] and fp["driver"] and len(table.entries) > 100
    assert resolve_table(name) == str(SHIPPED_DIR / f"{name}.json")


def test_a_file_of_that_name_wins_over_the_shipped_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100-bf16").write_text("{}")
    assert resolve_table("h100-bf16") == "h100-bf16"


def test_plan_names_the_shipped_table_and_prices_flash_attention_from_it():
    # gpt2 at batch 8 was timed on the H100 in bf16, cuDNN's fused attention included
    r = runner.invoke(app, ["plan", "gpt2", "-p", "1", "-b", "8", "--machine", "dgx-h100", "--precision", "bf16",
                            "--optimizer", "momentum", "--profile", "h100-bf16", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["step_s"] > 0
    table = read_table("h100-bf16")
    assert any(k.startswith("attention.fwd|") and k.endswith("|flash") for k in table.entries)


def test_a_plan_records_the_tables_identity_that_execute_compares(tmp_path):
    # execute warns "the plan was made with profile X but the profile loaded is Y" when the two
    # differ: plan must record the identity execute reads (ProfileTable.short_id), not a file hash
    out = tmp_path / "p.yaml"
    r = runner.invoke(app, ["plan", "gpt2", "-p", "1", "-b", "8", "--machine", "dgx-h100", "--precision", "bf16",
                            "--optimizer", "momentum", "--profile", "h100-bf16", "--out", str(out)])
    assert r.exit_code == 0, r.output
    from planner.plan.plan_file import read_plan  # noqa: PLC0415

    assert read_plan(str(out))[0].profile_fingerprint == read_table("h100-bf16").short_id


def test_a_profile_that_is_neither_a_file_nor_a_shipped_name_lists_the_shipped_ones():
    r = runner.invoke(app, ["plan", "gpt2", "-p", "1", "--profile", "h100"])
    assert r.exit_code == 2
    assert "no such profile table file" in r.output and "h100-bf16, h100-tf32" in r.output
