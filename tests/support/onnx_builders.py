"""Small ONNX models built with the onnx helper API for the importer's tests: a CNN with every op the
importer maps, and a 2-block transformer (the MatMul-Softmax-MatMul attention pattern, or ONNX's
fused Attention op). Weights are graph inputs with their shapes (no values), as a graph exported
without weights has them; the constants the graph computes with are initializers with values."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


class Builder:
    """Nodes, weights (declared inputs) and constants (initializers) of one graph."""

    def __init__(self):
        self.nodes, self.weights, self.consts, self.count = [], [], [], 0

    def weight(self, name: str, *dims: int) -> str:
        self.weights.append(helper.make_tensor_value_info(name, FLOAT, list(dims)))
        return name

    def const(self, name: str, value) -> str:
        self.consts.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str | None = None, outputs: int = 1, **attrs) -> str:
        self.count += 1
        name = name or f"{op.lower()}_{self.count}"
        outs = [name] + [f"{name}_out{i}" for i in range(1, outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return name

    def model(self, inputs, output: str, out_dims: list, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "test", [*inputs, *self.weights],
                                  [helper.make_tensor_value_info(output, FLOAT, out_dims)], self.consts)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
        return model


def small_cnn() -> tuple[onnx.ModelProto, int]:
    """Every op the importer maps but attention: (model, its parameter count worked out by hand)."""
    b = Builder()
    x = helper.make_tensor_value_info("image", FLOAT, ["N", 3, 16, 16])
    c1 = b.node("Conv", ["image", b.weight("c1.weight", 8, 3, 3, 3), b.weight("c1.bias", 8)], "c1",
                kernel_shape=[3, 3], pads=[1, 1, 1, 1])                                   # 216 + 8
    bn = b.node("BatchNormalization", [c1, b.weight("bn.scale", 8), b.weight("bn.b", 8), b.weight("bn.mean", 8),
                                       b.weight("bn.var", 8)], "bn", epsilon=1e-3, momentum=0.9)  # 16 (+16 stats)
    r1 = b.node("Relu", [bn], "r1")
    c2 = b.node("Conv", [r1, b.weight("c2.weight", 8, 4, 3, 3)], "c2", kernel_shape=[3, 3], group=2,
                dilations=[2, 2], pads=[2, 2, 2, 2])                                      # 288
    mp = b.node("MaxPool", [c2], "mp", kernel_shape=[2, 2], strides=[2, 2])               # (8, 8, 8)
    c3 = b.node("Conv", [mp, b.weight("c3.weight", 8, 8, 1, 1)], "c3", kernel_shape=[1, 1])  # 64
    c3b = b.node("Add", [c3, b.weight("c3.bias", 8, 1, 1)], "c3_bias")                   # 8
    ap = b.node("AveragePool", [mp], "ap", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
    s = b.node("Add", [c3b, ap], "sum")
    cat = b.node("Concat", [s, b.node("Identity", [mp], "same")], "cat", axis=1)       # (16, 8, 8)
    c4 = b.node("Conv", [cat, b.weight("c4.weight", 16, 16, 3, 3)], "c4", kernel_shape=[3, 3], strides=[2, 2],
                pads=[1, 1, 1, 1])                                                        # 2304 -> (16, 4, 4)
    g1 = b.node("Flatten", [b.node("GlobalAveragePool", [c4], "gap")], "flat", axis=1)
    g2 = b.node("Reshape", [b.node("ReduceMean", [c4, b.const("axes", np.array([2, 3]))], "mean", keepdims=1),
                            b.const("flat_shape", np.array([-1, 16]))], "reshape")
    both = b.node("Add", [g1, g2], "pooled")
    fc = b.node("Gemm", [both, b.weight("fc.weight", 32, 16), b.weight("fc.bias", 32)], "fc", transB=1)  # 544
    act = b.node("Dropout", [b.node("Gelu", [fc], "gelu", approximate="tanh"), b.const("ratio", np.array(0.25,
                 dtype=np.float32))], "drop")
    ln = b.node("LayerNormalization", [act, b.weight("ln.scale", 32), b.weight("ln.b", 32)], "ln", epsilon=1e-6)  # 64
    out = b.node("Add", [b.node("MatMul", [ln, b.weight("head.weight", 32, 10)], "head"), b.weight("head.bias", 10)],
                 "head_bias")                                                             # 330
    b.node("Softmax", [out], "probs", axis=-1)
    params = 216 + 8 + 16 + 288 + 64 + 8 + 2304 + 544 + 64 + 330
    return b.model([x], "probs", ["N", 10], opset=20), params


def _linear(b: Builder, x: str, name: str, fin: int, fout: int, bias: bool = True) -> str:
    y = b.node("MatMul", [x, b.weight(f"{name}.weight", fin, fout)], name)
    return b.node("Add", [y, b.weight(f"{name}.bias", fout)], f"{name}_bias") if bias else y


def _heads(b: Builder, x: str, name: str, seq: int, heads: int, dh: int, perm: list[int]) -> str:
    shaped = b.node("Reshape", [x, b.const(f"{name}_shape", np.array([-1, seq, heads, dh]))], f"{name}_split")
    return b.node("Transpose", [shaped], f"{name}_heads", perm=perm)


def _attention(b: Builder, x: str, p: str, seq: int, d: int, heads: int, fused: bool) -> str:
    dh = d // heads
    q, k, v = (_linear(b, x, f"{p}.{n}", d, d) for n in "qkv")
    if fused:
        att = b.node("Attention", [q, k, v], f"{p}.attention", q_num_heads=heads, kv_num_heads=heads, is_causal=1)
    else:
        scores = b.node("MatMul", [_heads(b, q, f"{p}.q", seq, heads, dh, [0, 2, 1, 3]),
                                   _heads(b, k, f"{p}.k", seq, heads, dh, [0, 2, 3, 1])], f"{p}.scores")
        scaled = b.node("Mul", [scores, b.const(f"{p}.scale", np.array(dh ** -0.5, dtype=np.float32))], f"{p}.scaled")
        mask = np.triu(np.full((seq, seq), -np.inf, dtype=np.float32), 1)
        masked = b.node("Add", [scaled, b.const(f"{p}.mask", mask)], f"{p}.masked")
        probs = b.node("Softmax", [masked], f"{p}.softmax", axis=-1)
        mixed = b.node("MatMul", [probs, _heads(b, v, f"{p}.v", seq, heads, dh, [0, 2, 1, 3])], f"{p}.mixed")
        merged = b.node("Transpose", [mixed], f"{p}.merge", perm=[0, 2, 1, 3])
        att = b.node("Reshape", [merged, b.const(f"{p}.back", np.array([-1, seq, d]))], f"{p}.merged")
    return _linear(b, att, f"{p}.out", d, d)


def transformer(blocks: int = 2, seq: int = 8, d: int = 16, heads: int = 2, vocab: int = 50,
                fused: bool = False) -> tuple[onnx.ModelProto, int]:
    """A pre-norm GPT-style decoder with learned positions and an untied head: (model, parameters)."""
    b = Builder()
    tokens = helper.make_tensor_value_info("tokens", INT64, ["N", seq])
    emb = b.node("Gather", [b.weight("wte", vocab, d), "tokens"], "wte_lookup")
    pos = b.node("Gather", [b.weight("wpe", seq, d), b.const("positions", np.arange(seq)[None, :])], "wpe_lookup")
    x = b.node("Add", [emb, pos], "embed")
    for i in range(blocks):
        ln1 = b.node("LayerNormalization", [x, b.weight(f"h{i}.ln1.g", d), b.weight(f"h{i}.ln1.b", d)], f"h{i}.ln1")
        x = b.node("Add", [x, _attention(b, ln1, f"h{i}.attn", seq, d, heads, fused)], f"h{i}.res1")
        ln2 = b.node("LayerNormalization", [x, b.weight(f"h{i}.ln2.g", d), b.weight(f"h{i}.ln2.b", d)], f"h{i}.ln2")
        h = b.node("Gelu", [_linear(b, ln2, f"h{i}.fc", d, 4 * d)], f"h{i}.gelu", approximate="tanh")
        x = b.node("Add", [x, _linear(b, h, f"h{i}.proj", 4 * d, d)], f"h{i}.res2")
    lnf = b.node("LayerNormalization", [x, b.weight("lnf.g", d), b.weight("lnf.b", d)], "lnf")
    _linear(b, lnf, "lm_head", d, vocab, bias=False)
    block = 4 * d * d + 4 * d + 2 * 2 * d + 8 * d * d + 4 * d + d
    params = vocab * d + seq * d + blocks * block + 2 * d + d * vocab
    return b.model([tokens], "lm_head", ["N", seq, vocab], opset=23 if fused else 20), params
