"""Llama 2 7B in the zoo and the ops it brought: rmsnorm, swiglu, attention's rotary positions.

Reference figures: Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models" (arXiv
2307.09288, 2023) and the released checkpoint's HuggingFace config (meta-llama/Llama-2-7b-hf:
hidden 4096, 32 layers, 32 heads, intermediate 11008, vocabulary 32000, context 4096, no biases,
untied head), whose 6,738,415,616 parameters the model card's "7B" rounds. Operation counts per
element are counted by hand here from each op's formula (docs/network-spec.md, "Costs").
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.calls.layer_calls import kernel_calls, PASSES
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import check_fits, input_layout, local_layer, output_layout
from costmodel.parallel.layout import axis_intervals
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.analysis import summarize
from networks.errors import DnnplanError
from networks.loader import load_network
from networks.spec import parse_network

A100 = load_machine("dgx-a100")
D, L, H, F, V, S = 4096, 32, 32, 11008, 32000, 4096


@pytest.fixture(scope="module")
def llama():
    return load_network("llama2-7b")


def _tiny(layers: list[str], inputs: str = "x: {shape: [6, 16]}"):
    text = "\n".join(["name: tiny", "inputs:", f"  {inputs}", "layers:", *(f"  - {x}" for x in layers),
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return parse_network(text, "<tiny>")


# --- the network --------------------------------------------------------------------------------

def test_parameter_count_is_the_released_checkpoints(llama):
    # embedding, 32 x (q, k, v, o; gate, up, down; two RMSNorm weights), final RMSNorm, untied head
    assert V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D + V * D == 6_738_415_616
    assert llama.num_params == 6_738_415_616


def test_structure_no_biases_untied_head_rotary_everywhere(llama):
    weights = [w for layer in llama.layers for w, _ in layer.weights]
    assert not [w for w in weights if "bias" in w]
    assert "positions" not in dict(llama.layer("embed").weights)  # rotary, no learned positions
    assert dict(llama.layer("lm_head").weights)["weight"] == (V, D)  # untied
    attns = [layer for layer in llama.layers if layer.op == "attention"]
    assert len(attns) == L and all(a.p["rotary"] and a.p["causal"] and a.p["heads"] == H for a in attns)
    norms = [layer for layer in llama.layers if layer.op == "rmsnorm"]
    assert len(norms) == 2 * L + 1 and all(n.p["eps"] == 1e-5 and dict(n.weights) == {"gamma": (D,)} for n in norms)
    assert llama.layer("layers0.gate_up").out_shape == (S, 2 * F)
    assert llama.layer("layers0.swiglu").out_shape == (S, F)


def test_macs_per_sequence_and_per_token(llama):
    per_block = 4 * S * D * D + 2 * S * S * D + 3 * S * D * F  # projections, scores and sum, MLP
    macs = summarize(llama, 1).macs_per_sample
    assert macs == L * per_block + S * D * V == 31_460_635_443_200
    assert macs // S == 7_680_819_200


# --- the new ops: operation counts by hand ---------------------------------------------------------

def test_rmsnorm_counts():
    net = _tiny(["{name: rms, op: rmsnorm}"])
    cost = local_cost(local_layer(net.layer("rms"), make_strategy(1, {}), 3))
    e = 3 * 6 * 16
    assert cost.flops == (4 * e, 7 * e, 2 * e)  # square+sum+scale+gamma; see norm.rms_costs
    assert cost.bytes_read[0] == e * 4 and cost.bytes_written[0] == e * 4
    assert cost.activation_bytes == 3 * 6 * 4  # one float32 inverse RMS a row
    assert dict(net.layer("rms").weights) == {"gamma": (16,)}


def test_swiglu_counts_and_shape():
    net = _tiny(["{name: up, op: linear, features: 20}", "{name: act, op: swiglu}"])
    act = net.layer("act")
    assert act.out_shape == (6, 10)
    cost = local_cost(local_layer(act, make_strategy(1, {}), 3))
    e = 3 * 6 * 10  # output elements
    assert cost.flops == (5 * e, 11 * e, 0)
    assert (cost.bytes_read, cost.bytes_written) == ((2 * e * 4, 3 * e * 4, 0), (e * 4, 2 * e * 4, 0))
    with pytest.raises(DnnplanError, match="even number"):
        _tiny(["{name: up, op: linear, features: 21}", "{name: act, op: swiglu}"])


def test_swiglu_feature_split_keeps_gate_and_up_pairs_together():
    net = _tiny(["{name: up, op: linear, features: 24}", "{name: act, op: swiglu}"])
    act = net.layer("act")
    s = make_strategy(4, {"C": 4})
    lo_in, hi_in = axis_intervals(input_layout(act, s, 2, 0), 2)
    lo_out, hi_out = axis_intervals(output_layout(act, s, 2), 2)
    assert list(lo_in) == [2 * x for x in lo_out] and list(hi_in) == [2 * x for x in hi_out]
    assert check_fits(act, make_strategy(5, {"C": 5}), 2) is not None  # 5 does not divide 12 pairs


def test_rotary_adds_three_operations_per_element_of_q_and_k():
    plain, rot = (_tiny([f"{{name: attn, op: attention, heads: 4, bias: false, rotary: {r}}}"]).layer("attn")
                  for r in ("false", "true"))
    for degrees, d_local in (({}, 16), ({"F": 2}, 8)):  # a head split rotates only the local heads
        s = make_strategy(max(1, sum(degrees.values())), degrees)
        a, b = (local_cost(local_layer(x, s, 3)) for x in (plain, rot))
        qk = 2 * 3 * 6 * d_local  # q and k elements of the local heads
        assert [y - x for x, y in zip(a.flops, b.flops)] == [3 * qk, 3 * qk, 0]
        assert a.macs == b.macs and a.activation_bytes == b.activation_bytes


# --- pricing: the borrowed kernels -----------------------------------------------------------------

def _calls(layer, strategy, batch):
    local = local_layer(layer, strategy, batch)
    return [kernel_calls(local, pass_) for pass_ in PASSES]


def test_rmsnorm_is_priced_on_the_layernorm_kernels():
    rms = _tiny(["{name: n, op: rmsnorm}"]).layer("n")
    ln = _tiny(["{name: n, op: layernorm}"]).layer("n")
    one = make_strategy(1, {})
    assert _calls(rms, one, 3) == _calls(ln, one, 3) and _calls(rms, one, 3)[0]


def test_swiglu_is_priced_as_the_unfused_gelu_and_add_kernels():
    net = _tiny(["{name: up, op: linear, features: 32}", "{name: act, op: swiglu}",
                 "{name: g, op: gelu, inputs: act}", "{name: sum, op: add, inputs: [act, g]}"])
    one = make_strategy(1, {})
    gelu_f, gelu_b, _ = _calls(net.layer("g"), one, 3)
    add_f, _, _ = _calls(net.layer("sum"), one, 3)
    fwd, bwd, wts = _calls(net.layer("act"), one, 3)
    assert fwd == gelu_f + add_f and bwd == gelu_f + add_f + add_f + gelu_b and wts == ()
    cost = local_cost(local_layer(net.layer("act"), one, 3))
    for calls, i in ((fwd, 0), (bwd, 1)):  # never below the op's own arithmetic or traffic
        assert sum(c.flops for c in calls) >= cost.flops[i]
        assert sum(c.bytes for c in calls) >= cost.bytes_read[i] + cost.bytes_written[i]


def test_rotary_adds_one_gelu_pass_over_q_and_k_to_attentions_kernels():
    plain, rot = (_tiny([f"{{name: attn, op: attention, heads: 4, rotary: {r}}}"]).layer("attn")
                  for r in ("false", "true"))
    s = make_strategy(2, {"F": 2})
    g = _tiny(["{name: g, op: gelu}"], "x: {shape: [6, 16]}").layer("g")  # 3 x 6 x 16 = q and k of 2 heads
    (gelu_fwd,), _, _ = _calls(g, make_strategy(1, {}), 3)
    a, b = _calls(plain, s, 3), _calls(rot, s, 3)
    assert list(b[0]) == [a[0][0], gelu_fwd, *a[0][1:]]
    assert list(b[1]) == [*a[1][:2], gelu_fwd, a[1][2]]
    assert b[2] == a[2]


# --- Megatron tensor parallelism -------------------------------------------------------------------

def test_megatron_layout_of_a_llama_block(llama):
    strategies, fallbacks = megatron_strategies(llama, 16, 4, 8)
    label = {name: s.label for name, s in strategies.items()}
    assert fallbacks == []
    assert label["embed"] == "N=2,C=8" and label["layers0.attn"] == "N=2,F=8"
    assert label["layers0.gate_up"] == "N=2,F=8"  # column-parallel gate and up
    assert label["layers0.swiglu"] == "N=2,C=8"  # keeps the feature split
    assert label["layers0.down"] == "N=2,C=8"  # row-parallel
    assert label["layers0.norm1"] == label["layers0.norm2"] == label["norm"] == "N=2,R=8"
    assert label["lm_head"] == "N=2,F=8" and label["loss"] == "N=2,C=8"


def test_one_allreduce_forward_and_one_backward_per_pair(llama):
    """Shoeybi et al. 2019, section 3: attention and the MLP each all-reduce the whole activation
    once forward (the row-parallel output) and once backward (the column-parallel input gradient)."""
    net = with_precision(llama, "fp16")
    strategies, _ = megatron_strategies(net, 8, 2, 8)
    block = [layer for layer in net.layers if layer.name.startswith("layers0.")]
    comms = {layer.name: [(c.phase, c.collective, c.nbytes) for c in layer_estimate(
        layer, strategies[layer.name], 2, A100, Roofline(A100)).comms if c.phase != "sync"] for layer in block}
    whole = 2 * S * D * 2  # batch 2, fp16
    assert comms["layers0.attn"] == [("fwd", "allreduce", whole), ("bwd", "allreduce", whole)]
    assert comms["layers0.gate_up"] == [("bwd", "allreduce", whole)]
    assert comms["layers0.down"] == [("fwd", "allreduce", whole)]
    assert all(not comms[name] for name in comms if name.split(".")[1] not in ("attn", "gate_up", "down"))


def test_predict_tensor_8_has_no_fallback_and_no_reshard():
    args = ["predict", "llama2-7b", "-p", "8", "--tensor", "8", "--precision", "fp16", "--optimizer", "adam",
            "--machine", "dgx-a100", "--batch", "8", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["fallbacks"] == []
    assert all(layer["reshard_s"] == 0 for layer in out["layers"])
    assert out["step_s"] > 0 and out["memory_peak_bytes"] > 0
