"""Reading an ONNX node's attributes: values, float32 numbers as written, 2-D windows and padding."""

from __future__ import annotations

from networks.importers.onnx.model_graph import Graph


def attrs(g: Graph, k: int) -> dict:
    """The node's attributes as Python values."""
    from onnx import helper  # noqa: PLC0415 - loaded with the ONNX importer only

    return {a.name: helper.get_attribute_value(a) for a in g.nodes[k].attribute}


def f32(x: float) -> float:
    """A float32 attribute as the decimal it was written as (1e-05, not 9.999999747378752e-06)."""
    return float(f"{x:.7g}")


def pair(values, name: str, g: Graph, k: int) -> list[int]:
    if len(values) != 2:
        raise g.fail(k, f"{name}={list(values)}: only 2-D windows (images) map")
    return [int(v) for v in values]


def padding(a: dict, g: Graph, k: int) -> list[int]:
    """Symmetric padding [h, w] from ONNX's [top, left, bottom, right]."""
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise g.fail(k, f"auto_pad={a['auto_pad']!r}: only explicit pads map", hint="export with explicit padding")
    pads = list(a.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4:
        raise g.fail(k, f"pads={pads}: only 2-D windows (images) map")
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise g.fail(k, f"pads={pads}: padding differs between the two sides, which conv2d and pooling cannot say")
    return pads[:2]
