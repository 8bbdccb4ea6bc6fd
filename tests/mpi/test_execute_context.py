"""Attention over a split sequence (H, context parallelism) in the executor
(executor/ops/attention_context.py): the keys and values all-gathered over the sequence group, their
gradients reduce-scattered back, rotary positions at each block's own.

- the rotation of a block from its first position equals that block of the whole sequence's;
- ``dnnplan execute --check`` under mpiexec on 2 to 4 ranks: context 4 and 3 (uneven blocks; causal,
  rotary, GQA),
  context 2 x tensor 2 with qk_norm, a non-causal layer, a GPT block with learned positions;
- a run whose key/value gradients are not summed over the group fails the check;
- a mixture of experts over a split sequence routes each rank's block with that block's capacity
  (as Megatron-Core counts it over a rank's tokens), the reference too: with the capacity dropping
  rows, a run giving each rank the whole sequence's capacity fails the check;
- the plan `dnnplan plan` makes for this computer (context on every layer) runs and passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from networks.loader import load_network
from kernels.rotary import rotary_backward, rotary_forward

from tests.support.kernel_checks import RNG
from tests.support.op_checks import ZOO, qwen_like, tiny_llama_variant

def test_a_blocks_rotation_starts_at_its_first_position():
    rng = RNG(7)
    x, r = rng.normal(size=(2, 12, 16)), rng.normal(size=(2, 12, 16))
    whole, _ = rotary_forward(x, 8)
    block, _ = rotary_forward(x[:, 4:8], 8, start=4)
    np.testing.assert_allclose(block, whole[:, 4:8], rtol=1e-12)
    np.testing.assert_allclose(rotary_backward(r[:, 8:], 8, start=8), rotary_backward(r, 8)[:, 8:], rtol=1e-12)


def _network(folder: Path, net: str) -> str:
    if net == "qk_norm":
        return qwen_like(folder)
    if net == "bidirectional":
        return tiny_llama_variant(folder, "tiny-encoder", "causal: true, bias: false", "causal: false, bias: false")
    return net


def _run(folder: Path, net: str, ranks: int, flags: list[str], warmup: int = 1):
    plan = folder / "plan.yaml"
    made = CliRunner().invoke(app, ["predict", _network(folder, net), "-p", str(ranks), "-b", "8", "--machine",
                                    "dgx-a100", "--optimizer", "momentum", "--precision", "fp32", "--out", str(plan), *flags])
    assert made.exit_code == 0, made.output
    out = folder / "run.json"
    result = CliRunner().invoke(app, ["execute", str(plan), "--ranks", str(ranks), "--steps", "1", "--warmup",
                                      str(warmup), "--check", "--json", str(out), "--timeout", "240"])
    return result, out


CASES = [("tiny-llama", 4, ["--context", "4"]), ("tiny-llama", 3, ["--context", "3"]),  # 16 positions: 5, 5, 6
         ("qk_norm", 4, ["--context", "2", "--tensor", "2"]),
         ("bidirectional", 2, ["--context", "2"]), ("tiny-gqa", 2, ["--context", "2"])]


@pytest.mark.mpi
@pytest.mark.parametrize("net,ranks,flags", CASES)
def test_dnnplan_execute_over_a_split_sequence_matches_one_process(tmp_path, net, ranks, flags):
    result, out = _run(tmp_path, net, ranks, flags)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"] and data["check"]["worst_rel_error"] <= 1e-4, data["check"]
    attn = {layer["name"]: layer for layer in data["measured"]["layers"]}["h0.attn"]
    assert attn["fwd_comm_s"] > 0 and attn["bwd_comm_s"] > 0  # the gather and the reduce-scatter


@pytest.mark.mpi
def test_check_catches_key_value_gradients_left_unsummed(tmp_path, monkeypatch):
    """Each rank keeps its own gradient of its keys and values, without the other ranks' shares
    (tests/support/workers/skip_context_sum_worker.py): --check fails (exit 3), by far, on a weight
    the wrong gradient reaches (an attention layer's, or one before the last attention layer)."""
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.skip_context_sum_worker")
    result, out = _run(tmp_path, "tiny-llama", 2, ["--context", "2"], warmup=0)
    assert result.exit_code == 3, result.output
    check = json.loads(out.read_text())["check"]
    assert not check["passed"] and check["worst_rel_error"] > 100 * 1e-4, check
    order = [layer.name for layer in load_network("tiny-llama").layers]
    last_attention = max(i for i, name in enumerate(order) if name.endswith(".attn"))
    assert order.index(check["worst_tensor"].rsplit(".", 1)[0]) <= last_attention, check


@pytest.mark.mpi
def test_the_plan_made_for_this_computer_runs(tmp_path):
    """`dnnplan plan --machine local` splits tiny-llama's sequence on every layer (its cheapest plan
    on this computer's profile); `dnnplan execute` runs that plan and passes the check."""
    plan = tmp_path / "plan.yaml"
    made = CliRunner().invoke(app, ["plan", "tiny-llama", "-p", "2", "-b", "8", "--machine", "local", "--optimizer",
                                    "momentum", "--out", str(plan), "--json"])
    assert made.exit_code == 0, made.output
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", str(plan), "--ranks", "2", "--steps", "1", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]


def _tight_moe(folder: Path) -> str:
    """tiny-moe at capacity factor 0.5: every block of 8 positions keeps 2 rows an expert of its 16
    choices over 4 experts, so the capacity drops rows wherever it is counted."""
    spec = (ZOO / "tiny-moe.yaml").read_text().replace("name: tiny-moe", "name: tiny-moe-tight").replace(
        "capacity_factor: 1.25", "capacity_factor: 0.5")
    assert "capacity_factor: 0.5" in spec
    path = folder / "tiny-moe-tight.yaml"
    path.write_text(spec)
    return str(path)


def test_the_reference_routes_each_sequence_block_with_its_own_capacity():
    from executor.check.reference_moe import moe_forward
    from executor.runtime.synthetic import init_weights
    from networks.loader import load_network
    net = load_network("tiny-moe")
    layer = net.layer("h0.moe")
    w = {name: arr for (lname, name), arr in init_weights(net, 0, np.float64).items() if lname == "h0.moe"}
    p = {**layer.p, "capacity_factor": 0.5}
    x = RNG(3).standard_normal((2, 16, 32))
    whole, _ = moe_forward(x, w, p)
    halves, _ = moe_forward(x, w, p, ((0, 8), (8, 16)))
    first, _ = moe_forward(x[:, :8], w, p)
    second, _ = moe_forward(x[:, 8:], w, p)
    np.testing.assert_allclose(halves, np.concatenate([first, second], axis=1), rtol=1e-12)
    assert not np.allclose(halves, whole)  # the capacity drops other rows


@pytest.mark.mpi
def test_a_mixture_of_experts_over_a_split_sequence_matches_one_process(tmp_path):
    made = CliRunner().invoke(app, ["predict", _tight_moe(tmp_path), "-p", "4", "-b", "8", "--machine", "dgx-a100",
                                    "--context", "2", "--expert", "2", "--optimizer", "momentum", "--precision", "fp32",
                                    "--out", str(tmp_path / "plan.yaml")])
    assert made.exit_code == 0, made.output
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", str(tmp_path / "plan.yaml"), "--ranks", "4", "--steps", "1",
                                      "--warmup", "1", "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]


@pytest.mark.mpi
def test_check_catches_the_whole_sequences_capacity_on_a_block(tmp_path, monkeypatch):
    made = CliRunner().invoke(app, ["predict", _tight_moe(tmp_path), "-p", "2", "-b", "8", "--machine", "dgx-a100",
                                    "--context", "2", "--optimizer", "momentum", "--precision", "fp32", "--out", str(tmp_path / "plan.yaml")])
    assert made.exit_code == 0, made.output
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.whole_sequence_capacity_worker")
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", str(tmp_path / "plan.yaml"), "--ranks", "2", "--steps", "1",
                                      "--warmup", "0", "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 3, result.output
    check = json.loads(out.read_text())["check"]
    assert not check["passed"] and check["worst_rel_error"] > 100 * 1e-4, check
