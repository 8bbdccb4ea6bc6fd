"""ONNX graphs imported as network specs (networks/importers/onnx_*.py).

Graphs built here with the onnx helper API (tests/support/onnx_builders.py: a CNN with every op the
importer maps, a 2-block transformer in the MatMul-Softmax-MatMul form and with ONNX's fused
Attention op), and graph-only exports shipped in tests/assets/onnx/ (made by export.py there):
torchvision's ResNet-50, whose 25,557,032 parameters are torchvision's (and the zoo's), and
Hugging Face's GPT-2 small, whose 124,439,808 are the zoo's gpt2.
"""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import helper

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from networks.analysis import summarize
from networks.errors import DnnplanError
from networks.importers.onnx.importer import import_onnx
from networks.loader import load_network
from networks.spec import parse_network
from planner.problem.solve import make_plan

from tests.support.onnx_builders import Builder, small_cnn, transformer
from tests.support.paths import ASSETS

ONNX = ASSETS / "onnx"


def imported(model: onnx.ModelProto, seq: int | None = None):
    text = import_onnx(model.SerializeToString(), "test.onnx", seq, "test")
    return parse_network(text, "test.onnx")


def refusal(model: onnx.ModelProto, seq: int | None = None) -> str:
    with pytest.raises(DnnplanError) as err:
        import_onnx(model.SerializeToString(), "test.onnx", seq, "test")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("test.onnx"), msg
    return msg


def _sig(net):
    return [(l.op, l.in_shapes, l.out_shape, l.p) for l in net.layers]


def test_a_cnn_with_every_mapped_op_keeps_its_parameters_and_shapes():
    model, params = small_cnn()
    net = imported(model)
    assert net.num_params == params
    assert {l.op for l in net.layers} == {"conv2d", "batchnorm2d", "relu", "maxpool2d", "avgpool2d", "add", "concat",
                                          "global_avgpool", "flatten", "linear", "gelu", "dropout", "layernorm",
                                          "softmax_cross_entropy"}
    by = {l.name: l for l in net.layers}
    assert by["c2"].p["groups"] == 2 and by["c2"].p["dilation"] == (2, 2) and by["c2"].p["padding"] == (2, 2)
    assert by["c3"].p["bias"] and not by["c4"].p["bias"] and by["c4"].out_shape == (16, 4, 4)
    assert by["bn"].p["eps"] == pytest.approx(1e-3) and by["bn"].p["momentum"] == pytest.approx(0.1)
    assert by["ap"].p["count_include_pad"] and by["drop"].p["rate"] == 0.25 and by["ln"].p["eps"] == 1e-6
    assert by["mean"].op == "global_avgpool" and by["reshape"].op == "flatten" and by["cat"].out_shape == (16, 8, 8)
    assert by["loss"].inputs == ("head",)  # the softmax at the output is the loss's own


@pytest.mark.parametrize("fused", [False, True], ids=["matmul-softmax-matmul", "fused Attention op"])
def test_a_two_block_transformer_maps_its_attention_to_the_attention_op(fused):
    model, params = transformer(fused=fused)
    net = imported(model)
    assert net.num_params == params
    attn = [l for l in net.layers if l.op == "attention"]
    assert len(attn) == 2 and all(a.p["heads"] == 2 and a.p["causal"] and a.p["bias"] for a in attn)
    assert net.layer("wte_lookup").p["positions"] == 8
    assert not [l for l in net.layers if l.op in ("reshape", "softmax")]
    assert len(net.layers) == 1 + 2 * 8 + 3


def test_onnxruntimes_contrib_attention_op_maps_with_its_output_projection():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, 16])
    b.nodes.append(helper.make_node("Attention", ["x", b.weight("qkv.w", 16, 48), b.weight("qkv.b", 48)], ["att"],
                                    name="att", domain="com.microsoft", num_heads=2, unidirectional=1))
    out = b.node("Add", [b.node("MatMul", ["att", b.weight("o.w", 16, 16)], "o"), b.weight("o.b", 16)], "o_bias")
    head = b.node("MatMul", [b.node("Add", ["x", out], "res"), b.weight("head", 16, 5)], "head")
    model = b.model([x], head, ["N", 8, 5])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    net = imported(model)
    (attn,) = [l for l in net.layers if l.op == "attention"]
    assert attn.p["heads"] == 2 and attn.p["causal"] and attn.p["bias"]
    assert net.num_params == 4 * 16 * 16 + 4 * 16 + 16 * 5


def test_an_attention_without_a_mask_is_not_causal():
    model, _ = transformer(blocks=1)
    for node in model.graph.node:
        if node.op_type == "Add" and node.input[1].endswith(".mask"):
            mask = next(t for t in model.graph.initializer if t.name == node.input[1])
            mask.CopyFrom(onnx.numpy_helper.from_array(np.zeros((8, 8), dtype=np.float32), mask.name))
    (attn,) = [l for l in imported(model).layers if l.op == "attention"]
    assert not attn.p["causal"]


def test_resnet50_export_has_torchvisions_parameters_and_the_zoos_layers():
    net = load_network(str(ONNX / "resnet50.onnx"))
    assert net.num_params == 25_557_032  # torchvision.models.resnet50: 25,557,032 parameters
    assert _sig(net) == _sig(load_network("resnet50"))


def test_resnet50_export_plans_as_the_zoos_resnet50_on_8_devices():
    machine = load_machine("dgx-a100")
    compute = Roofline(machine)
    ours = make_plan(load_network(str(ONNX / "resnet50.onnx")), "resnet50.onnx", 256, 8, machine, compute)
    zoo = make_plan(load_network("resnet50"), "resnet50", 256, 8, machine, compute)
    assert [(l.strategy, l.algorithm) for l in ours.layers] == [(l.strategy, l.algorithm) for l in zoo.layers]
    assert ours.step_s == pytest.approx(zoo.step_s, rel=1e-12)


def test_gpt2_export_has_the_zoos_parameters_and_work():
    net, zoo = load_network(str(ONNX / "gpt2.onnx")), load_network("gpt2")
    assert net.num_params == zoo.num_params == 124_439_808  # tied head: the table counts once
    assert net.layers[-2].p["tied_to"] == net.layers[0].name
    assert summarize(net, 1).macs_per_sample == summarize(zoo, 1).macs_per_sample
    attn = [l for l in net.layers if l.op == "attention"]
    assert len(attn) == 12 and all(a.p["heads"] == 12 and a.p["causal"] for a in attn)


# --- refusals -----------------------------------------------------------------------------------

def _one_op(op: str, **attrs) -> onnx.ModelProto:
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8])
    y = b.node(op, ["x"], "odd", **attrs)
    b.node("Gemm", [y, b.weight("w", 4, 8)], "fc", transB=1)
    return b.model([x], "fc", ["N", 4], opset=20)


@pytest.mark.parametrize("op,attrs,words", [
    ("Sin", {}, "op Sin has no counterpart in the op catalogue"),
    ("Sigmoid", {}, "the op catalogue has no 'sigmoid' op"),
    ("Gelu", {}, "approximate=none: the catalogue's gelu is the tanh approximation"),
    ("Softmax", {"axis": -1}, "a softmax that is neither part of an attention pattern (its scores are not a MatMul"),
])
def test_an_op_that_does_not_map_is_refused_naming_the_node(op, attrs, words):
    msg = refusal(_one_op(op, **attrs))
    assert f"node 'odd' ({op}, node 1 of 2, reading 'x' from the graph's inputs)" in msg and words in msg, msg


def test_attention_whose_queries_are_rotated_in_the_graph_is_refused_saying_where():
    model, _ = transformer(blocks=1)
    for node in model.graph.node:
        if node.name == "h0.attn.q_split":  # q + q * c before the heads: two activations into one Add
            scaled = helper.make_node("Mul", [node.input[0], "h0.attn.scale"], ["q_rot"], name="rot_mul")
            mixed = helper.make_node("Add", [node.input[0], "q_rot"], ["q_mixed"], name="rot_add")
            node.input[0] = "q_mixed"
    k = next(i for i, n in enumerate(model.graph.node) if n.name == "h0.attn.q_split")
    model.graph.node.insert(k, mixed)
    model.graph.node.insert(k, scaled)
    msg = refusal(model)
    assert "node 'rot_mul' (Mul" in msg and "Softmax 'h0.attn.softmax' after it is not read as attention: its query " \
        "does not come from a linear projection" in msg and "it stops at node 'rot_add' (Add)" in msg, msg


def test_asymmetric_padding_is_refused():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 8, 8])
    c = b.node("Conv", ["x", b.weight("w", 4, 3, 3, 3)], "conv", kernel_shape=[3, 3], pads=[0, 0, 1, 1])
    b.node("Gemm", [b.node("Flatten", [c], "flat"), b.weight("fc", 2, 4 * 7 * 7)], "fc", transB=1)
    assert "pads=[0, 0, 1, 1]: padding differs between the two sides" in refusal(b.model([x], "fc", ["N", 2]))


def test_a_dynamic_sequence_needs_seq():
    model, params = transformer(blocks=1)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "S"
    assert "dynamic dimension 1" in refusal(model) and "--seq" in refusal(model)
    assert imported(model, seq=8).num_params == params
    assert "--seq 6 differs" in refusal(transformer(blocks=1)[0], seq=6)


def test_seq_on_a_float_input_of_features_says_the_graph_takes_no_sequence():
    b = Builder()  # an MLP: 784 pixels a sample, which are no sequence
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 784])
    b.node("Gemm", ["x", b.weight("w", 10, 784)], "fc", transB=1)
    msg = refusal(b.model([x], "fc", ["N", 10]), seq=100)
    assert "the graph takes no sequence" in msg and "fixed sequence" not in msg


def test_an_input_without_axes_says_how_to_export_it():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    b.node("Gemm", ["x", b.weight("w", 10, 784)], "fc", transB=1)
    assert "declares no axes" in refusal(b.model([x], "fc", ["N", 10])) and "batch first" in \
        refusal(b.model([x], "fc", ["N", 10]))


def test_an_input_of_one_axis_is_the_batch_alone_and_says_so():
    """x [64] times a [64, 10] weight: its one axis is read as the batch, so a sample has no features;
    said in one line, not an index error."""
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [64])
    b.node("MatMul", ["x", b.weight("w", 64, 10)], "fc")
    msg = refusal(b.model([x], "fc", [10]))
    assert "input 'x' [64] has one axis" in msg and "batch axis first" in msg


def test_an_axis_of_size_zero_is_said_so_not_called_dynamic():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 0])
    b.node("Gemm", ["x", b.weight("w", 10, 64)], "fc", transB=1)
    msg = refusal(b.model([x], "fc", ["N", 10]))
    assert "has an axis of size 0 (axis 1)" in msg and "dynamic" not in msg


def test_a_product_by_a_weight_of_another_shape_names_the_weight_not_two_activations():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 64])
    b.node("MatMul", ["x", b.weight("w", 64)], "fc")
    msg = refusal(b.model([x], "fc", ["N"]))
    assert "multiplies by the weight 'w' [64]" in msg and "two activations" not in msg


def test_a_mask_from_the_input_data_is_refused():
    model, _ = transformer(blocks=1)
    model.graph.input.append(helper.make_tensor_value_info("pad", onnx.TensorProto.FLOAT, ["N", 1, 8, 8]))
    for node in model.graph.node:
        if node.op_type == "Add" and node.input[1].endswith(".mask"):
            node.input[1] = "pad"
    assert "the attention mask depends on the input data" in refusal(model)


def test_shared_weights_other_than_a_tied_head_are_refused():
    b = Builder()
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8])
    h = b.node("Gemm", ["x", b.weight("w", 8, 8)], "fc1", transB=1)
    b.node("Gemm", [h, "w"], "fc2", transB=1)
    assert "uses the weight 'w' of layer 'w' again" in refusal(b.model([x], "fc2", ["N", 8]))


@pytest.mark.parametrize("data,words", [(b"", "holds no graph"), (b"\x08\x07garbage\xff\xff", "not an ONNX model")])
def test_a_file_that_is_not_an_onnx_model_is_one_line(data, words):
    with pytest.raises(DnnplanError) as err:
        import_onnx(data, "bad.onnx")
    assert words in str(err.value) and str(err.value).startswith("bad.onnx")
