"""Grouped-query attention and the mixture of experts run for real (issue 52): ``dnnplan execute
--check`` under mpiexec on 2 and 4 ranks (data, tensor and (MoE) expert parallelism, shared and
plain-GELU experts at capacity one), and a run whose expert exchange or key/value sum is broken
fails the check. The ops on one process: tests/unit/executor/ops/test_moe_gqa_ops.py.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch

from tests.support.executor_plans import predicted_plan
from tests.support.paths import ZOO

# real ranks: dnnplan predict --out, then dnnplan execute --check

CASES = [(net, ranks, tensor, expert) for ranks in (2, 4)
         for net, tensor, expert in (("tiny-gqa", 1, 1), ("tiny-gqa", ranks, 1), ("tiny-moe", 1, 1),
                                     ("tiny-moe", ranks, 1), ("tiny-moe", 1, ranks), ("tiny-moe", 1, 2),
                                     ("tiny-moe", 2, 2))
         if tensor * expert <= ranks]


@pytest.mark.mpi
@pytest.mark.parametrize("net,ranks,tensor,expert", sorted(set(CASES)))
def test_dnnplan_execute_matches_one_process(tmp_path, net, ranks, tensor, expert):
    plan = predicted_plan(tmp_path, net, ranks, tensor, expert)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "1", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"], data["check"]
    assert data["check"]["worst_rel_error"] <= 1e-4
    measured = {layer["name"]: layer for layer in data["measured"]["layers"]}
    if tensor > 1:  # the head split all-reduces the attention's output
        assert measured["h0.attn"]["fwd_comm_s"] > 0
    if expert > 1:  # the dispatch and combine all-to-alls over the expert group
        assert measured["h0.moe"]["fwd_comm_s"] > 0 and measured["h0.moe"]["bwd_comm_s"] > 0


@pytest.mark.mpi
def test_shared_experts_plain_gelu_experts_and_capacity_one_under_tensor_and_expert_parallelism(tmp_path):
    zoo = ZOO / "tiny-moe.yaml"
    spec = zoo.read_text().replace("name: tiny-moe", "name: tiny-moe-shared").replace(
        "capacity_factor: 1.25}", "capacity_factor: 1.0, shared_experts: 1, gated: false, activation: gelu}")
    assert "shared_experts: 1" in spec
    (tmp_path / "shared.yaml").write_text(spec)
    plan = predicted_plan(tmp_path, str(tmp_path / "shared.yaml"), 4, tensor=2, expert=2)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", "4", "--steps", "1", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]


@pytest.mark.mpi
@pytest.mark.parametrize("net,tensor,expert,broken", [("tiny-moe", 1, 4, ".moe."), ("tiny-gqa", 4, 1, ".attn.kv_")])
def test_check_catches_a_missing_expert_exchange_or_key_value_sum(tmp_path, monkeypatch, net, tensor, expert, broken):
    """No all-to-all over the expert group, or no sum of a replicated key/value head's gradient
    (tests/support/workers/skip_moe_gqa_sums_worker.py): --check fails (exit 3), by far."""
    plan = predicted_plan(tmp_path, net, 4, tensor, expert)
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.skip_moe_gqa_sums_worker")
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", "4", "--steps", "1", "--warmup", "0", "--check",
                                      "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 3, result.output
    check = json.loads(out.read_text())["check"]
    assert not check["passed"] and check["worst_rel_error"] > 100 * 1e-4, check
    assert broken in check["worst_tensor"], check
