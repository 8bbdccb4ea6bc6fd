"""Grouped-query attention and the mixture of experts in the executor on one process (issue 52).

- the tiny zoo networks' parameter counts by hand (their YAML headers derive them);
- the MoE kernels: the router's capacity drops the rows its docstring says, and the experts' and
  the router's backward against finite differences;
- the ops on one rank's shard against finite differences and the reference step's own code;
- ``dnnplan predict --tensor/--expert --out`` writes the plan file the executor runs.

``dnnplan execute --check`` of them under mpiexec: tests/mpi/test_execute_moe_gqa.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.ops import attention, moe
from kernels import moe as k
from networks.loader import load_network
from planner.plan.plan_file import read_plan

from tests.support.executor_plans import predicted_plan
from tests.support.kernel_checks import RNG, fd_directional
from tests.support.op_checks import check_op, one_rank_ctx


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


# the ops on one rank's shard against finite differences and the reference step's own code

@pytest.mark.parametrize("net_name,name,op_module", [("tiny-gqa", "h0.attn", "attention"), ("tiny-moe", "h0.moe", "moe")])
def test_the_op_against_finite_differences_and_the_reference(net_name, name, op_module):
    check_op(one_rank_ctx(net_name, name), {"attention": attention, "moe": moe}[op_module])


# the plan file the runs execute: dnnplan predict --out

def test_predict_out_writes_the_expert_and_tensor_splits(tmp_path):
    plan, _ = read_plan(predicted_plan(tmp_path, "tiny-moe", 4, tensor=2, expert=2))
    strategies = plan.strategies()
    assert strategies["h0.moe"].degree("E") == 2 and strategies["h0.moe"].degree("F") == 2
    assert strategies["h0.attn"].degree("F") == 2 and strategies["h0.attn"].degree("N") == 2


def test_predict_out_refuses_a_pipeline_in_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    result = CliRunner().invoke(app, ["predict", "tiny-moe", "-p", "4", "-b", "8", "--machine", "dgx-a100",
                                      "--expert", "2", "--pipeline", "2", "--out", str(path)])
    assert result.exit_code == 2 and "--out writes a plan without pipeline" in result.output
    assert "Traceback" not in result.output and not path.exists()
