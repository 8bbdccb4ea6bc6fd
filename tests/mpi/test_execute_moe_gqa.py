"""Grouped-query attention and the mixture of experts in the executor (issue 52).

- the tiny zoo networks' parameter counts by hand (their YAML headers derive them);
- the MoE kernels: the router's capacity drops the rows its docstring says, and the experts' and
  the router's backward against finite differences;
- ``dnnplan predict --tensor/--expert --out`` writes the plan file the executor runs;
- ``dnnplan execute --check`` under mpiexec on 2 and 4 ranks: data, tensor and (MoE) expert
  parallelism, and a run whose expert exchange is broken fails the check.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from executor.ops import attention, moe
from kernels import moe as k
from networks.loader import load_network
from planner.plan.plan_file import read_plan

from tests.support.kernel_checks import RNG, fd_directional
from tests.support.op_checks import check_op, one_rank_ctx
from tests.support.paths import ZOO


def _params(name: str) -> int:
    return sum(int(np.prod(shape)) for layer in load_network(name).layers for _, shape in layer.weights)


def test_tiny_gqa_parameter_count_by_hand():
    d, vocab, seq, hidden, kv = 32, 128, 16, 128, 16  # kv: 2 key/value heads of 8
    attention = d * d + 2 * kv * d + d * d + (d + 2 * kv + d)
    block = 2 * d + attention + 2 * d + (d * hidden + hidden) + (hidden * d + d)
    assert _params("tiny-gqa") == vocab * d + seq * d + 2 * block + 2 * d == 27_968


def test_tiny_moe_parameter_count_by_hand():
    d, vocab, seq, experts, hidden, kv = 32, 128, 16, 4, 32, 16
    attention = d * d + 2 * kv * d + d * d + (d + 2 * kv + d)
    moe = experts * d + experts * (2 * hidden) * d + experts * d * hidden  # router, gated w_in, w_out
    block = 2 * d + attention + 2 * d + moe
    assert _params("tiny-moe") == vocab * d + seq * d + 2 * block + 2 * d == 36_096


def test_the_router_fills_each_expert_first_choices_first_and_drops_past_capacity():
    # one sequence of 4 tokens, 2 experts, top 1: every token prefers expert 0; capacity 2
    logits = np.array([[[2.0, 0.0], [3.0, 0.0], [1.0, 0.0], [4.0, 0.0]]])
    probs, experts, slots, gates = k.route(logits, 1, k.capacity(1.0, 4, 1, 2))
    assert experts[0, :, 0].tolist() == [0, 0, 0, 0]
    assert slots[0, :, 0].tolist() == [0, 1, -1, -1]  # sequence order; tokens 2 and 3 dropped
    assert gates[0, 2, 0] == 0 and gates[0, 0, 0] == pytest.approx(probs[0, 0, 0])
    # top 2: second choices queue behind every first choice of the sequence
    _, experts, slots, _ = k.route(logits, 2, k.capacity(1.0, 4, 2, 2))
    assert slots[0, :, 0].tolist() == [0, 1, 2, 3] and slots[0, :, 1].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("activation,gated", [("silu", True), ("gelu", False), ("relu", False)])
def test_the_experts_backward_against_finite_differences(activation, gated):
    rng = RNG(3)
    rows, w_in = rng.normal(size=(2, 5, 6)), rng.normal(size=(2, 8 if gated else 4, 6))
    w_out, r = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 5, 6))
    out, cache = k.experts_forward(rows, w_in, w_out, activation, gated)
    grads = k.experts_backward(r, cache, w_in, w_out, activation, gated)
    fd_directional(lambda a, b, c: float(np.sum(r * k.experts_forward(a, b, c, activation, gated)[0])),
                   [rows, w_in, w_out], list(grads))


def test_the_router_backward_against_finite_differences():
    rng = RNG(4)
    logits, r = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 2))
    probs, experts, _, gates = k.route(logits, 2, 10)
    got = k.router_backward(r, probs, experts)

    def loss(z):  # the chosen experts held fixed, as the top-k is within a small step
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return float(np.sum(r * np.take_along_axis(p, experts, axis=-1)))
    fd_directional(loss, [logits], [got])


# real ranks: dnnplan predict --out, then dnnplan execute --check

def _plan(folder, net: str, ranks: int, tensor: int = 1, expert: int = 1) -> str:
    path = folder / f"{Path(net).stem}-{ranks}-t{tensor}-e{expert}.yaml"
    args = ["predict", net, "-p", str(ranks), "-b", "8", "--machine", "dgx-a100", "--out", str(path)]
    args += ["--tensor", str(tensor)] if tensor > 1 else []
    args += ["--expert", str(expert)] if expert > 1 else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(path)


def test_predict_out_writes_the_expert_and_tensor_splits(tmp_path):
    plan, _ = read_plan(_plan(tmp_path, "tiny-moe", 4, tensor=2, expert=2))
    strategies = plan.strategies()
    assert strategies["h0.moe"].degree("E") == 2 and strategies["h0.moe"].degree("F") == 2
    assert strategies["h0.attn"].degree("F") == 2 and strategies["h0.attn"].degree("N") == 2


def test_predict_out_refuses_a_pipeline_in_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    result = CliRunner().invoke(app, ["predict", "tiny-moe", "-p", "4", "-b", "8", "--machine", "dgx-a100",
                                      "--expert", "2", "--pipeline", "2", "--out", str(path)])
    assert result.exit_code == 2 and "--out writes a plan without pipeline" in result.output
    assert "Traceback" not in result.output and not path.exists()


CASES = [(net, ranks, tensor, expert) for ranks in (2, 4)
         for net, tensor, expert in (("tiny-gqa", 1, 1), ("tiny-gqa", ranks, 1), ("tiny-moe", 1, 1),
                                     ("tiny-moe", ranks, 1), ("tiny-moe", 1, ranks), ("tiny-moe", 1, 2),
                                     ("tiny-moe", 2, 2))
         if tensor * expert <= ranks]


@pytest.mark.mpi
@pytest.mark.parametrize("net,ranks,tensor,expert", sorted(set(CASES)))
def test_dnnplan_execute_matches_one_process(tmp_path, net, ranks, tensor, expert):
    plan = _plan(tmp_path, net, ranks, tensor, expert)
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
    plan = _plan(tmp_path, str(tmp_path / "shared.yaml"), 4, tensor=2, expert=2)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", "4", "--steps", "1", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]


@pytest.mark.mpi
@pytest.mark.parametrize("net,tensor,expert,broken", [("tiny-moe", 1, 4, "h0.moe."), ("tiny-gqa", 4, 1, ".attn.kv_")])
def test_check_catches_a_missing_expert_exchange_or_key_value_sum(tmp_path, monkeypatch, net, tensor, expert, broken):
    """No all-to-all over the expert group, or no sum of a replicated key/value head's gradient
    (tests/support/workers/skip_moe_gqa_sums_worker.py): --check fails (exit 3), by far."""
    plan = _plan(tmp_path, net, 4, tensor, expert)
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.skip_moe_gqa_sums_worker")
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", "4", "--steps", "1", "--warmup", "0", "--check",
                                      "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 3, result.output
    check = json.loads(out.read_text())["check"]
    assert not check["passed"] and check["worst_rel_error"] > 100 * 1e-4, check
    assert broken in check["worst_tensor"], check


# the ops on one rank's shard against finite differences and the reference step's own code

@pytest.mark.parametrize("net_name,name,op_module", [("tiny-gqa", "h0.attn", "attention"), ("tiny-moe", "h0.moe", "moe")])
def test_the_op_against_finite_differences_and_the_reference(net_name, name, op_module):
    check_op(one_rank_ctx(net_name, name), {"attention": attention, "moe": moe}[op_module])
