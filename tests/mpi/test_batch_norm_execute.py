"""`dnnplan execute --check` of a CNN with batch norm on 2 ranks under --batch-norm sync and local
(issue 55), and N x H local on 4: each passes against a reference that normalises as the plan
says; a worker that synchronises a local plan's statistics anyway fails it."""

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch

pytestmark = pytest.mark.mpi
runner = CliRunner()
TINYRES = "tests/assets/tinyres.yaml"


def _plan(tmp_path, bn: str, strategy: str = "data", ranks: int = 2) -> str:
    out = tmp_path / f"{bn}-{strategy}.yaml"
    result = runner.invoke(app, ["predict", TINYRES, "-p", str(ranks), "-b", "8", "-s", strategy, "--machine",
                                 "dgx-a100", "--batch-norm", bn, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return str(out)


def _execute(plan: str, tmp_path, ranks: int = 2):
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "1", "--warmup", "0", "--check",
                                 "--json", str(out)])
    return result, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.parametrize("bn,strategy", [("sync", "data"), ("local", "data"), ("local", "spatial")])
def test_check_passes_under_either_batch_norm(tmp_path, bn, strategy):
    result, data = _execute(_plan(tmp_path, bn, strategy), tmp_path)
    assert result.exit_code == 0, result.output
    assert data["check"]["passed"]
    assert ("each rank's sample shard" in " ".join(result.output.split())) == (bn == "local")


def test_a_local_plan_split_over_samples_and_rows_sums_its_statistics_over_the_rows_only(tmp_path):
    """N=2 x H=2 on 4 ranks (oversubscribed; numerics only): each sample shard spans two ranks."""
    result, data = _execute(_plan(tmp_path, "local", "N=2,H=2", ranks=4), tmp_path, ranks=4)
    assert result.exit_code == 0, result.output
    assert data["check"]["passed"]


def test_a_local_plan_run_with_synchronised_statistics_fails_the_check(tmp_path, monkeypatch):
    plan = _plan(tmp_path, "local")
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.sync_anyway_worker")
    result, data = _execute(plan, tmp_path)
    assert result.exit_code == 3, result.output
    assert "_bn" in data["check"]["worst_tensor"]
    assert data["check"]["worst_rel_error"] > 100 * 1e-4  # far beyond the tolerance, not rounding
