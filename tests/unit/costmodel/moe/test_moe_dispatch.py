"""--moe-dispatch alltoall|flex (issue 52): the expert split's tokens moved by Megatron-Core's
all-to-all of capacity buffers, or by its flex dispatcher (DeepEP, HybridEP: each token once to
each node and rank holding any of its experts), in the cost model (costmodel.comm.expert), the
network marking (costmodel.choices.moe_dispatch), the plan file, `predict`, `plan`'s summary and
`execute`'s refusal."""

import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from costmodel.comm.expert import PASSES, flex_bytes, flex_seconds, miss
from costmodel.machine.loading import load_machine
from costmodel.parallel.shard import local_layer
from costmodel.choices.moe_dispatch import MOE_DISPATCHES, check_machine_dispatch, moe_dispatch_of, with_moe_dispatch
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network
from networks.ops.moe import DISPATCHERS
from planner.plan.plan_file import read_plan

runner = CliRunner()


def _moe(net):
    return next(layer for layer in net.layers if layer.op == "moe")


def test_the_dispatchers_described_are_the_ops():
    assert tuple(MOE_DISPATCHES) == DISPATCHERS == ("alltoall", "flex")


def test_miss_is_the_hypergeometric_chance_counted_by_enumeration():
    # 8 experts, 2 a token, 4 of them held: of the C(8,2) = 28 pairs, C(4,2) = 6 avoid the four
    assert miss(8, 4, 2) == pytest.approx(6 / 28)
    for experts, held, k in ((6, 2, 3), (8, 2, 2), (12, 4, 3), (5, 5, 1)):
        pairs = list(itertools.combinations(range(experts), k))
        avoid = sum(1 for p in pairs if all(e >= held for e in p))
        assert miss(experts, held, k) == pytest.approx(avoid / len(pairs))
        assert miss(experts, held, k) == pytest.approx(math.comb(experts - held, k) / math.comb(experts, k))


def _qwen3_layer(expert: int, devices: int):
    """Qwen3-30B-A3B's first moe layer (128 experts, top 8, D 2048) at 4096 tokens, bf16, its
    experts split ``expert`` ways over ``devices`` ranks, one sequence a rank."""
    net = with_moe_dispatch(load_network("qwen3-30b-a3b", 4096), "flex")
    layer = _moe(net)
    strategy = make_strategy(devices, {"N": devices // expert, "E": expert})
    return layer, strategy, local_layer(layer, strategy, devices)


def test_flex_bytes_by_hand_for_two_nodes_of_eight():
    layer, strategy, local = _qwen3_layer(16, 16)
    assert local.batch == 1 and local.in_shapes[0] == (4096, 2048)
    inter, intra = flex_bytes(local, 2, per_node=8, nodes=2)
    token = 4096 * 2048 * 2  # one sequence's tokens, bf16
    node_miss = math.comb(64, 8) / math.comb(128, 8)  # a token's 8 experts all on its own node
    rank_miss = math.comb(120, 8) / math.comb(128, 8)  # none of them on a given rank's 8
    assert inter == pytest.approx(token * 1 * (1 - node_miss))
    assert intra == pytest.approx(token * 2 * 7 * (1 - rank_miss))
    # the all-to-all moves every (token, expert) row: 8 rows a token, 8/16 of them to the other node
    # (4 tokens' worth); the flex dispatcher sends a token across the network at most once
    assert inter < token * 8 * 8 / 16 / 3


def test_flex_bytes_match_a_simulated_routing():
    """Draw each token's experts at random and count what the flex dispatcher sends for rank 0's
    tokens: once to each other node hit (to its peer there), and on each node hit the forwarder's
    writes to the other ranks hit there. By symmetry the forwarding that rank 0's tokens cause on
    every node equals what one forwarder does for its own node: its own tokens and its peers'."""
    experts, k, per_node, nodes, tokens = 32, 4, 4, 2, 4000
    ranks = per_node * nodes
    rng = np.random.default_rng(0)
    cross = forwarded = 0
    for _ in range(tokens):
        chosen = rng.choice(experts, size=k, replace=False)
        hit_ranks = set((chosen // (experts // ranks)).tolist())
        cross += len({r // per_node for r in hit_ranks} - {0})
        forwarded += sum(1 for r in hit_ranks if r % per_node != 0)  # the forwarders have local index 0
    local = SimpleNamespace(batch=1, in_shapes=((tokens, 1),),
                            p={"experts": experts, "top_k": k, "capacity_factor": 1.0})
    inter, intra = flex_bytes(local, 1, per_node, nodes)  # one-byte tokens: bytes are token counts
    assert cross == pytest.approx(inter, rel=0.05)
    assert forwarded == pytest.approx(intra, rel=0.05)
    doubled = flex_bytes(SimpleNamespace(batch=1, in_shapes=((tokens, 1),), p={**local.p, "capacity_factor": 2.0}),
                         1, per_node, nodes)
    assert doubled == pytest.approx((2 * inter, 2 * intra))  # the busiest rank's share under the stated imbalance


def test_flex_seconds_take_the_longer_stage_and_one_node_only_nvlink():
    m = load_machine("dgx-h100")
    one = flex_seconds(0.0, 1e8, 8, 1, m)
    assert one == pytest.approx(7 * m.intra.alpha_s + 1e8 * m.intra.beta_s_per_byte)
    two = flex_seconds(2e7, 1e8, 8, 2, m)
    assert two == pytest.approx(max(m.inter.alpha_s + 2e7 * m.inter.beta_s_per_byte,
                                    7 * m.intra.alpha_s + 1e8 * m.intra.beta_s_per_byte))
    assert flex_seconds(0.0, 0.0, 1, 1, m) == 0.0


def _expert_comms(dispatch: str, expert: int, devices: int) -> list[dict]:
    args = ["predict", "qwen3-30b-a3b", "--seq", "4096", "-p", str(devices), "-b", str(devices), "--expert",
            str(expert), "--machine", "dgx-h100", "--precision", "bf16", "--overlap", "none", "--json"]
    result = runner.invoke(app, args + (["--moe-dispatch", dispatch] if dispatch else []))
    assert result.exit_code == 0, result.output
    layers = json.loads(result.stdout)["layers"]
    moe = next(x for x in layers if x["name"].endswith(".moe"))
    return [c for c in moe["comm"] if c["purpose"] in dict(PASSES)]


def test_predict_prices_the_flex_exchange_from_its_bytes_and_the_alltoall_as_before():
    flex, alltoall, default = (_expert_comms(d, 16, 16) for d in ("flex", "alltoall", ""))
    assert alltoall == default and {c["collective"] for c in alltoall} == {"alltoall"}
    assert [(c["purpose"], c["collective"]) for c in flex] == [(p, "flex") for p, _ in PASSES]
    _, _, local = _qwen3_layer(16, 16)
    inter, intra = flex_bytes(local, 2, 8, 2)
    expected = flex_seconds(inter, intra, 8, 2, load_machine("dgx-h100"))
    for c in flex:
        assert c["s"] == pytest.approx(expected) and c["bytes"] == int(inter + intra) and c["group"] == 16
    # across two nodes the network carries a quarter of the all-to-all's rows or less: the flex
    # exchange takes under a third of the all-to-all's time
    assert sum(c["s"] for c in flex) < sum(c["s"] for c in alltoall) / 3


def test_in_one_node_flex_writes_each_rank_hit_once():
    flex = _expert_comms("flex", 8, 8)
    _, _, local = _qwen3_layer(8, 8)
    inter, intra = flex_bytes(local, 2, 8, 1)
    token = 4096 * 2048 * 2
    assert inter == 0 and intra == pytest.approx(token * 7 * (1 - math.comb(112, 8) / math.comb(128, 8)))
    assert intra < token * 8 * 7 / 8  # the all-to-all's rows sent off the rank: 8 a token, 7/8 elsewhere
    assert flex[0]["s"] == pytest.approx(flex_seconds(0.0, intra, 8, 1, load_machine("dgx-h100")))


def test_alltoall_leaves_the_network_as_it_was_and_flex_marks_its_moe_layers():
    net = load_network("tiny-moe")
    assert with_moe_dispatch(net, "alltoall") is net and moe_dispatch_of(net) == "alltoall"
    flex = with_moe_dispatch(net, "flex")
    assert moe_dispatch_of(flex) == "flex" and flex.content_hash() != net.content_hash()
    changed = [a.name for a, b in zip(net.layers, flex.layers) if a != b]
    assert changed == [layer.name for layer in net.layers if layer.op == "moe"]
    with pytest.raises(DnnplanError, match="unknown --moe-dispatch"):
        with_moe_dispatch(net, "deepep")


def test_flex_is_refused_off_a_gpu_machine_in_one_line():
    with pytest.raises(DnnplanError, match="GPU libraries"):
        check_machine_dispatch("flex", "cpu", "local")
    check_machine_dispatch("alltoall", "cpu", "local")
    result = runner.invoke(app, ["plan", "tiny-moe", "-p", "2", "--machine", "local", "--moe-dispatch", "flex"])
    assert result.exit_code == 2 and "not a GPU machine" in result.output and "Traceback" not in result.output


def test_a_flex_plan_records_it_predicts_it_again_and_execute_refuses_it(tmp_path):
    out = tmp_path / "p.yaml"
    args = ["plan", "tiny-moe", "-p", "16", "-b", "16", "--machine", "dgx-h100", "--precision", "bf16",
            "--optimizer", "momentum", "--moe-dispatch", "flex", "--time-limit", "10", "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(out.read_text())
    assert data["moe_dispatch"] == "flex"
    plan, net = read_plan(str(out))
    assert plan.choices.moe_dispatch == "flex" and moe_dispatch_of(net) == "flex"
    again = runner.invoke(app, ["predict", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_s"] == pytest.approx(data["step_s"], rel=1e-9)
    clash = runner.invoke(app, ["predict", str(out), "--moe-dispatch", "alltoall"])
    assert clash.exit_code == 2 and "differs from the plan's moe_dispatch flex" in clash.output
    refused = runner.invoke(app, ["execute", str(out), "--ranks", "16"])
    assert refused.exit_code == 2 and "--moe-dispatch alltoall" in refused.output
    assert "Traceback" not in refused.output


def test_an_alltoall_plan_file_has_no_moe_dispatch_key(tmp_path):
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["plan", "tiny-moe", "-p", "2", "-b", "4", "--machine", "dgx-h100", "--out",
                                 str(out), "--time-limit", "10"])
    assert result.exit_code == 0, result.output
    assert "moe_dispatch" not in yaml.safe_load(out.read_text())
    assert read_plan(str(out))[0].choices.moe_dispatch == "alltoall"


def test_the_summary_names_the_dispatcher_of_a_network_with_experts_only():
    flex = runner.invoke(app, ["plan", "tiny-moe", "-p", "16", "-b", "16", "--machine", "dgx-h100",
                               "--moe-dispatch", "flex", "--time-limit", "10"])
    assert flex.exit_code == 0, flex.output
    assert "--moe-dispatch flex" in " ".join(flex.stdout.split())
    dense = runner.invoke(app, ["plan", "mlp", "-p", "2", "--machine", "dgx-h100", "--time-limit", "10"])
    assert dense.exit_code == 0 and "moe-dispatch" not in dense.stdout
