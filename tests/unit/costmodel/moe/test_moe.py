"""The mixture-of-experts op and expert parallelism: parameters and work counted by hand
(networks/ops/moe.py), the dispatch and combine all-to-alls against the layout algebra
(costmodel/comm/expert.py), the tokens' layout under an expert split, memory per device by what
holds it, and the strategies the planner weighs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.layer.candidates import candidate_strategies
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine
from costmodel.calls.layer_calls import kernel_calls
from costmodel.layer.edge import edge_estimate
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import check_fits, local_layer
from costmodel.parallel.layout import AxisSplit, Layout, reshard_peaks
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.spec import parse_network

H100 = load_machine("dgx-h100")
S, D = 16, 64


def _net(moe: str):
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{S}, {D}]}}", "layers:",
                      f"  - {{name: moe, op: moe, {moe}}}", "  - {name: fc, op: linear, features: 5}",
                      "  - {name: loss, op: softmax_cross_entropy}"])
    return parse_network(text, "<t>")


def test_parameters_by_hand():
    e, h, hs = 8, 32, 48
    gated = _net(f"experts: {e}, top_k: 2, hidden: {h}").layer("moe")
    assert gated.num_params == e * D + e * (2 * h * D + D * h)  # router; gate and up, down per expert
    plain = _net(f"experts: {e}, hidden: {h}, gated: false, activation: gelu, bias: true").layer("moe")
    assert plain.num_params == e * D + e * (h * D + D * h) + e * (h + D)
    shared = _net(f"experts: {e}, hidden: {h}, shared_experts: 2, shared_hidden: {hs}, shared_gate: true")
    layer = shared.layer("moe")
    assert dict(layer.weights)["shared_in"] == (2 * 2 * hs, D) and dict(layer.weights)["shared_gate"] == (1, D)
    assert layer.num_params == e * D + e * 3 * h * D + 3 * D * 2 * hs + D


def test_work_by_hand_each_token_through_top_k_experts_at_the_capacity_factor():
    e, k, h, cf, n = 8, 2, 32, 1.25, 3
    layer = _net(f"experts: {e}, top_k: {k}, hidden: {h}, capacity_factor: {cf}").layer("moe")
    cost = local_cost(local_layer(layer, make_strategy(1, {}), n))
    tokens = n * S
    rows = int(cf * tokens * k)  # each expert's batch padded to cf times its even share
    assert cost.macs == tokens * D * e + rows * D * h * 3 + rows * D  # router, experts, combine
    # forward FLOPs: the MACs twice, the router's softmax and top-k (6 a logit), SwiGLU (5 a hidden element)
    assert cost.flops[0] == 2 * cost.macs + 6 * tokens * e + 5 * rows * h
    assert cost.flops[2] == 2 * (tokens * D * e + rows * D * h * 3)  # the weight gradients
    # kept: routing probabilities; the dispatched rows, their gate/up, their hidden, their outputs
    assert cost.activation_bytes == 4 * (tokens * e + rows * (2 * D + 3 * h))


@pytest.mark.parametrize("e", [2, 4, 8])
def test_dispatch_and_combine_move_what_the_layout_algebra_moves(e):
    k, cf, batch = 2, 1.0, 8
    layer = _net(f"experts: 8, top_k: {k}, hidden: 32, capacity_factor: {cf}").layer("moe")
    strat = make_strategy(e, {"E": e})
    local = local_layer(layer, strat, batch)
    assert local.batch == batch // e and local.p["experts"] == 8 // e
    est = layer_estimate(layer, strat, batch, H100, Roofline(H100))
    moves = [c for c in est.comms if c.collective == "alltoall"]
    assert [(c.purpose, c.phase) for c in moves] == [("dispatch", "fwd"), ("combine", "fwd"),
                                                      ("combine_grad", "bwd"), ("dispatch_grad", "bwd")]
    rows = int(cf * local.batch * S * k)
    assert {c.nbytes for c in moves} == {rows * D * 4} and {c.group for c in moves} == {e}
    # the routed rows as a (source rank, destination rank, rows, D) tensor, evenly routed: owned by
    # source, needed by destination; each rank receives (e - 1) / e of what it sends, as the all-to-all
    shape = (e, e, rows // e, D)
    own = Layout(shape, strat, (AxisSplit("E", e, e), None, None, None))
    need = Layout(shape, strat, (None, AxisSplit("E", e, e), None, None))
    assert reshard_peaks(own, need)[0] * 4 == moves[0].nbytes * (e - 1) // e


def test_expert_split_tokens_lie_as_their_data_parallel_neighbours_hold_them():
    net = _net("experts: 8, hidden: 32")
    moe, fc = net.layer("moe"), net.layer("fc")
    edge = edge_estimate(moe, make_strategy(16, {"N": 2, "E": 8}), fc, make_strategy(16, {"N": 16}), 0, 16, H100)
    assert (edge.fwd_bytes, edge.bwd_bytes) == (0, 0)
    assert check_fits(moe, make_strategy(6, {"E": 6}), 12) == "E=6 must divide 8 for moe"
    assert "cannot cover" in check_fits(moe, make_strategy(16, {"N": 4, "E": 4}), 8)


def test_memory_per_device_by_what_holds_it():
    net = _net("experts: 8, hidden: 32, shared_experts: 1")
    layer = net.layer("moe")
    experts = 8 * 3 * 32 * D  # routed experts' weights
    replicated = 8 * D + 3 * 32 * D  # the router and the shared expert
    for strat, held in (({"N": 8}, experts + replicated), ({"E": 8}, experts // 8 + replicated),
                        ({"E": 4, "F": 2}, experts // 8 + 8 * D + 3 * 32 * D // 2)):
        est = layer_estimate(layer, make_strategy(8, strat), 8, H100, Roofline(H100), "", "adam")
        assert est.memory.weights == 4 * held and est.memory.grads == 4 * held
        assert est.memory.optimizer == 2 * 4 * held  # Adam's two float32 moments
    # the experts' gradients over the ranks holding the same experts (expert data parallelism)
    est = layer_estimate(layer, make_strategy(16, {"N": 2, "E": 8}), 16, H100, Roofline(H100))
    syncs = sorted((c.group, c.nbytes) for c in est.comms if c.purpose == "grad_sync")
    assert syncs == [(2, 4 * experts // 8), (16, 4 * replicated)]


def test_the_planner_weighs_expert_splits():
    layer = _net("experts: 8, hidden: 32").layer("moe")
    labels = {s.label for s in candidate_strategies(layer, 8, 8)}
    assert {"N=8", "E=8", "N=2,E=4", "N=4,E=2"} <= labels


def test_impossible_moe_parameters_are_one_line():
    with pytest.raises(DnnplanError, match="top_k=9 exceeds the 8 experts"):
        _net("experts: 8, top_k: 9, hidden: 32")
    with pytest.raises(DnnplanError, match="shared_gate"):
        _net("experts: 8, hidden: 32, shared_gate: true")


def test_predict_lays_tensor_context_and_expert_degrees_as_megatron_core_does():
    runner = CliRunner()
    got = runner.invoke(app, ["predict", "mixtral-8x7b", "-p", "32", "-b", "32", "--machine", "dgx-h100",
                              "--precision", "bf16", "--tensor", "2", "--context", "2", "--expert", "4", "--json"])
    assert got.exit_code == 0, got.output
    layers = {x["name"]: x for x in json.loads(got.stdout)["layers"]}
    assert layers["layers0.attn"]["degrees"] == {"N": 8, "H": 2, "F": 2} and layers["layers0.attn"]["algorithm"] == "flash"
    assert layers["layers0.moe"]["degrees"] == {"N": 2, "E": 4, "H": 2, "F": 2}
    assert layers["layers0.norm1"]["degrees"] == {"N": 8, "H": 2}
    assert {c["purpose"] for c in layers["layers0.moe"]["comm"]} >= {"dispatch", "combine"}
    bad = runner.invoke(app, ["predict", "mixtral-8x7b", "-p", "32", "-b", "32", "--expert", "3"])
    assert bad.exit_code == 2 and "expert-parallel degree 3" in bad.output
    slow = runner.invoke(app, ["predict", "llama3-8b", "-p", "8", "-b", "8", "--machine", "dgx-h100", "--precision",
                               "bf16", "--tensor", "8", "--attention", "materialized", "--json"])
    assert slow.exit_code == 0 and {x["algorithm"] for x in json.loads(slow.stdout)["layers"]
                                    if x["name"].endswith(".attn")} == {"materialized"}


def test_the_experts_gemms_are_priced_on_the_matrix_peak_and_their_activation_on_the_cuda_cores():
    """A 16-bit MoE layer's experts run their projections on the tensor cores (as cuBLAS does) and
    SwiGLU elementwise: the roofline of its forward pass lies between the GEMMs at the 16-bit
    matrix peak and everything at the CUDA cores' peak, and is never below its GEMMs at peak."""
    from costmodel.calls.moe import experts_gemm_flops  # noqa: PLC0415 - this test's own subject
    from costmodel.choices.precision import with_precision  # noqa: PLC0415 - this test's own subject

    text = "\n".join(["name: t", "inputs:", "  x: {shape: [4096, 4096]}", "layers:",
                      "  - {name: moe, op: moe, experts: 8, top_k: 2, hidden: 14336}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    layer = with_precision(parse_network(text, "t.yaml"), "bf16").layer("moe")  # Mixtral's layer
    local = local_layer(layer, make_strategy(1, {}), 1)
    roof = Roofline(H100)
    calls = kernel_calls(local, "fwd", "")
    experts = [c for c in calls if c.kernel.startswith("moe_experts.")]
    gemm = sum(experts_gemm_flops(c) for c in experts)
    assert experts and 0 < gemm < sum(c.flops for c in experts)
    got = roof.pass_s(local, "fwd", "")
    assert got >= gemm / H100.device.peak_flops["bfloat16"]
    all_cuda = sum(roof._time(c.flops, c.bytes) for c in calls)
    assert got < 0.5 * all_cuda
