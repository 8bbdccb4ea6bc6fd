"""--batch-norm sync|local (issue 55, "assumptions said"): synchronised batch norm (SyncBatchNorm, the
default) against each rank's own statistics (PyTorch DDP's BatchNorm2d), in the cost model, the plan
file, the summary and the reference step --check compares with. Executing both on 2 ranks is in
tests/mpi/test_batch_norm_execute.py (marked mpi)."""

import json
import re

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from costmodel.choices.training import TrainingChoices
from costmodel.choices.batch_norm import batch_norm_of, with_batch_norm
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from executor.check.gradients import tolerance_for
from executor.check.reference import reference_step
from executor.check.reference_bn import sample_shards
from executor.session import validate as validation
from executor.session.validate import RunSettings
from networks.loader import load_network
from planner.plan.plan_file import read_plan

runner = CliRunner()
TINYRES = "tests/assets/tinyres.yaml"


def _predict(*args: str) -> dict:
    result = runner.invoke(app, ["predict", *args, "--machine", "dgx-a100", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _comms(pred: dict) -> list[dict]:
    return [dict(c, layer=layer["name"]) for layer in pred["layers"] for c in layer["comm"]]


def test_local_batch_norm_has_no_statistics_allreduce_under_a_sample_split():
    sync = _predict("resnet18", "-p", "2", "-b", "4", "--batch-norm", "sync")
    local = _predict("resnet18", "-p", "2", "-b", "4", "--batch-norm", "local")
    bns = [layer.name for layer in load_network("resnet18").layers if layer.op == "batchnorm2d"]
    stats = [c for c in _comms(sync) if c["purpose"] == "stats"]
    assert sorted({c["layer"] for c in stats}) == sorted(bns) and len(stats) == 2 * len(bns)  # fwd and bwd
    assert not [c for c in _comms(local) if c["purpose"] == "stats"]
    assert len(_comms(local)) == len(_comms(sync)) - 2 * len(bns)  # the rest (gradient sync) unchanged
    assert local["step_s"] < sync["step_s"]


def test_a_spatial_split_keeps_its_statistics_allreduce_under_local():
    local = _predict("resnet18", "-p", "4", "-b", "4", "-s", "spatial", "--batch-norm", "local")
    spatial = [layer for layer in local["layers"] if layer["name"].endswith(("bn1", "bn2"))
               and ("H" in layer["degrees"] or "W" in layer["degrees"])]
    assert spatial
    for layer in spatial:
        assert [c["phase"] for c in layer["comm"] if c["purpose"] == "stats"] == ["fwd", "bwd"]


def test_sync_leaves_the_network_as_it_was_and_local_marks_it():
    net = load_network("resnet18")
    assert with_batch_norm(net, "sync") is net and batch_norm_of(net) == "sync"
    local = with_batch_norm(net, "local")
    assert batch_norm_of(local) == "local" and local.content_hash() != net.content_hash()
    assert [l.p.get("sync") for l in local.layers if l.op == "batchnorm2d"] == [False] * 20
    assert all(a == b for a, b in zip(net.layers, local.layers) if a.op != "batchnorm2d")


def test_the_plan_file_records_the_choice_and_a_file_without_it_reads_as_sync(tmp_path):
    for bn in ("sync", "local"):
        out = tmp_path / f"{bn}.yaml"
        result = runner.invoke(app, ["predict", TINYRES, "-p", "2", "-b", "8", "--machine", "dgx-a100",
                                     "--batch-norm", bn, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert yaml.safe_load(out.read_text())["batch_norm"] == bn
        plan, net = read_plan(str(out))
        assert plan.choices.batch_norm == bn == batch_norm_of(net)
    data = yaml.safe_load((tmp_path / "sync.yaml").read_text())
    del data["batch_norm"]  # a plan written before the choice existed
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data, sort_keys=False))
    assert read_plan(str(old))[0].choices.batch_norm == "sync"
    data["batch_norm"] = "ddp"
    old.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(app, ["predict", str(old)])
    assert result.exit_code == 2 and "field 'batch_norm'" in result.output and "sync, local" in result.output


def test_predict_of_a_plan_follows_the_plan_and_refuses_another_choice(tmp_path):
    out = tmp_path / "local.yaml"
    assert runner.invoke(app, ["predict", TINYRES, "-p", "2", "-b", "8", "--machine", "dgx-a100", "--batch-norm",
                               "local", "--out", str(out)]).exit_code == 0
    again = json.loads(runner.invoke(app, ["predict", str(out), "--json"]).output)
    assert not [c for c in _comms(again) if c["purpose"] == "stats"]
    result = runner.invoke(app, ["predict", str(out), "--batch-norm", "sync"])
    assert result.exit_code == 2 and "differs from the plan's batch_norm local" in result.output


def test_an_unknown_choice_is_one_line():
    result = runner.invoke(app, ["predict", "resnet18", "--batch-norm", "ddp"])
    assert result.exit_code == 2 and "unknown --batch-norm 'ddp'" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["plan", "predict", "validate"])
def test_help_names_the_choice(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    text = re.sub(r"\s+", " ", result.output)
    assert "--batch-norm" in text and "SyncBatchNorm" in text and "DDP" in text


def _tinyres_local_n2():
    net = with_batch_norm(load_network(TINYRES), "local")
    strategies = {layer.name: make_strategy(2, {"N": 2}) for layer in net.layers}
    return net, sample_shards(net, strategies, 8)


def test_the_sample_shards_follow_the_plan():
    net, shards = _tinyres_local_n2()
    assert set(shards) == {"stem_bn", "b1_bn1", "b1_bn2"} and shards["stem_bn"] == ((0, 4), (4, 8))
    strategies = {layer.name: make_strategy(2, {"H": 2}) for layer in net.layers}
    assert sample_shards(net, strategies, 8, micro_batches=2)["stem_bn"] == ((0, 4), (4, 8))  # a micro-batch each
    assert sample_shards(load_network(TINYRES), strategies, 8) == {}  # synchronised: the whole batch


def test_the_reference_of_a_local_plan_differs_from_the_synchronised_one_far_beyond_the_tolerance():
    """So a run that synchronised anyway (or did not where it must) fails --check."""
    net, shards = _tinyres_local_n2()
    _, sync = reference_step(net, 8, {}, 3, np.float64)
    _, local = reference_step(net, 8, {}, 3, np.float64, shards=shards)
    worst = max(np.linalg.norm(local[k] - sync[k]) / np.linalg.norm(sync[k]) for k in sync
                if np.linalg.norm(sync[k]) > 1e-8)
    assert worst > 100 * tolerance_for({})
    _, whole = reference_step(net, 8, {}, 3, np.float64, shards={name: ((0, 8),) for name in shards})
    assert all(np.allclose(whole[k], sync[k], rtol=1e-12, atol=1e-15) for k in sync)  # one shard: the batch's


def test_validate_records_the_choice_and_does_not_resume_a_partial_run_of_the_other():
    settings = RunSettings(steps=1, warmup=0, check=False)

    def report(bn):
        ctx = validation.resolve(TINYRES, 2, 8, "dgx-a100", None, False, TrainingChoices.from_flags(batch_norm=bn))
        return validation.new_report(ctx, "dgx-a100", settings)

    sync = report(None).to_json()
    assert sync["batch_norm"] == "sync" and report("local").to_json()["batch_norm"] == "local"
    assert validation.conflicts(sync, report("local")) == ["batch_norm sync there, local here"]
    older = {k: v for k, v in sync.items() if k != "batch_norm"}  # a partial report written before the choice
    assert validation.conflicts(older, report(None)) == []
