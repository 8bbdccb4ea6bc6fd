"""Pooling nodes of an ONNX graph: MaxPool, AveragePool, GlobalAveragePool, and ReduceMean over the
spatial axes (how ``torch.export`` writes an adaptive average pool to 1x1)."""

from __future__ import annotations

from networks.importers.onnx.attrs import attrs, padding, pair
from networks.importers.onnx.map import Mapper
from networks.importers.values import Val


def _window(m: Mapper, k: int) -> dict:
    g = m.g
    a = attrs(g, k)
    if "kernel_shape" not in a:
        raise g.fail(k, "has no kernel_shape")
    return {"kernel": Val(pair(a["kernel_shape"], "kernel_shape", g, k), "kernel_shape"),
            "stride": Val(pair(a.get("strides", [1, 1]), "strides", g, k), "strides"),
            "padding": Val(padding(a, g, k), "pads"), "ceil_mode": Val(bool(a.get("ceil_mode", 0)), "ceil_mode")}


def maxpool(m: Mapper, k: int) -> None:
    g = m.g
    node = g.nodes[k]
    if len([o for o in node.output if o]) > 1 and any(g.consumers.get(o) for o in node.output[1:]):
        raise g.fail(k, "its indices output is used, which maxpool2d does not give")
    params = _window(m, k)
    params["dilation"] = Val(pair(attrs(g, k).get("dilations", [1, 1]), "dilations", g, k), "dilations")
    m.emit(k, "maxpool2d", [node.input[0]], params)


def avgpool(m: Mapper, k: int) -> None:
    g = m.g
    a = attrs(g, k)
    if list(a.get("dilations", [1, 1])) != [1, 1]:
        raise g.fail(k, f"dilations={list(a['dilations'])}: avgpool2d takes no dilation (as PyTorch's AvgPool2d)")
    params = _window(m, k)
    params["count_include_pad"] = Val(bool(a.get("count_include_pad", 0)), "count_include_pad")
    m.emit(k, "avgpool2d", [g.nodes[k].input[0]], params)


def global_avgpool(m: Mapper, k: int) -> None:
    m.emit(k, "global_avgpool", [m.g.nodes[k].input[0]], {})


def reduce_mean(m: Mapper, k: int) -> None:
    """The mean over H and W of (C, H, W): a global average pool (then a flatten without keepdims)."""
    g, node = m.g, m.g.nodes[k]
    a = attrs(g, k)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(x) for x in g.const(node.input[1], k).reshape(-1)]
    x = m.act(node.input[0], k)
    if len(x.shape) != 3 or sorted(ax % 4 for ax in (axes or [])) != [2, 3]:
        raise g.fail(k, f"a mean over axes {axes} of {tuple(x.shape)} per sample; only one over H and W of "
                     "(C, H, W) maps (as a global average pool)")
    if a.get("keepdims", 1):
        m.emit(k, "global_avgpool", [node.input[0]], {})
        return
    pooled = m.emit(k, "global_avgpool", [node.input[0]], {}, out=node.output[0] + "#pooled")
    m.emit(k, "flatten", [node.output[0] + "#pooled"], {}, name=pooled.name + "_flat")


CONVERTERS = {"MaxPool": maxpool, "AveragePool": avgpool, "GlobalAveragePool": global_avgpool,
              "ReduceMean": reduce_mean}
