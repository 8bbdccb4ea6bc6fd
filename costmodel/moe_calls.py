"""The kernel calls of a mixture-of-experts shard, per pass (pure; networks/ops/moe.py).

The kernel set has no router, grouped GEMM or token permutation of its own yet (the executor does
not run ``moe``), so a shard is priced as the unfused sequence a framework runs, on the kernels the
set has (costmodel.kernel_proxies does the same for SwiGLU):

* forward: the router's GEMM (``linear.fwd``, tokens x D -> experts) and its softmax and top-k
  (``gelu.fwd`` over the logits: one read and one write each); per local expert its input GEMM
  (``linear.fwd``, its rows x D -> m hidden), the activation (gated: ``gelu.fwd`` and the product
  on ``add.fwd``, as swiglu; plain: ``gelu.fwd``), its output GEMM; the weighted combine of the
  rows back into tokens (``add.fwd`` over the rows); the shared experts likewise over every token,
  and their gate (``linear.fwd`` to one, ``gelu.fwd`` for the sigmoid, ``add.fwd`` for the scale);
* backward-data: the same in reverse with ``linear.bwd_data`` (the activation's gradient on
  ``gelu.bwd``, the products' on ``add.fwd``); backward-weights: ``linear.bwd_weights`` of every GEMM.

Each local expert computes an even share of the local rows ``capacity_factor x tokens x top_k``
(the load assumption of networks/ops/moe.py): ``R / experts_local`` rows each.
"""

from __future__ import annotations

from costmodel.kernel_call import KernelCall, linear_call
from costmodel.layer_layouts import LocalLayer
from networks.ops.moe import widths


def _elementwise(kernel: str, elems: int, dtype: str, item: int) -> KernelCall:
    """gelu.fwd / gelu.bwd (8 / 12 a element) or a product on add.fwd (one read more, 1 a element)."""
    if kernel == "add.fwd":
        return KernelCall(kernel, (elems,), dtype, "", elems, 3 * elems * item)
    flops, reads = {"gelu.fwd": (8, 1), "gelu.bwd": (12, 2)}[kernel]
    return KernelCall(kernel, (elems,), dtype, "", flops * elems, (reads + 1) * elems * item)


def _mlp(rows: int, d: int, m: int, h: int, bias: bool, pass_: str, dtype: str, item: int) -> list[KernelCall]:
    """One MLP of width ``h`` (input projection of ``m h``) over ``rows`` rows, in ``pass_``."""
    if rows <= 0 or h <= 0:
        return []
    act = [_elementwise("gelu.fwd", rows * h, dtype, item)] + \
        ([_elementwise("add.fwd", rows * h, dtype, item)] if m == 2 else [])
    if pass_ == "fwd":
        return [linear_call("linear.fwd", rows, d, m * h, bias, dtype, item), *act,
                linear_call("linear.fwd", rows, h, d, bias, dtype, item)]
    if pass_ == "bwd_data":
        grads = [_elementwise("add.fwd", rows * h, dtype, item)] * (2 if m == 2 else 0) + \
            [_elementwise("gelu.bwd", rows * h, dtype, item)]
        return [linear_call("linear.bwd_data", rows, h, d, bias, dtype, item), *act[1:], *grads,
                linear_call("linear.bwd_data", rows, d, m * h, bias, dtype, item)]
    return [linear_call("linear.bwd_weights", rows, h, d, bias, dtype, item),
            linear_call("linear.bwd_weights", rows, d, m * h, bias, dtype, item)]


def moe_calls(local: LocalLayer, pass_: str, dtype: str, item: int) -> tuple[KernelCall, ...]:
    """The calls of ``pass_`` of a mixture-of-experts shard (module docstring)."""
    p = local.p
    s, d = local.in_shapes[0]
    m, h, hs = widths(p)
    tokens = local.batch * s
    rows = int(round(p["capacity_factor"] * tokens * p["top_k"]))
    experts, total = p["experts"], p.get("experts_total", p["experts"])
    per_expert = -(-rows // experts)
    kernel = {"fwd": "linear.fwd", "bwd_data": "linear.bwd_data", "bwd_weights": "linear.bwd_weights"}[pass_]
    out = [linear_call(kernel, tokens, d, total, False, dtype, item)]  # the router
    if pass_ != "bwd_weights":
        out.append(_elementwise("gelu.fwd" if pass_ == "fwd" else "gelu.bwd", tokens * total, dtype, item))
    for _ in range(experts):
        out += _mlp(per_expert, d, m, h, p["bias"], pass_, dtype, item)
    if pass_ != "bwd_weights":
        out.append(_elementwise("add.fwd", rows * d, dtype, item))  # the weighted combine (its gradient)
    out += _mlp(tokens, d, m, hs, p["bias"], pass_, dtype, item)
    if hs and p["shared_gate"]:
        out.append(linear_call(kernel, tokens, d, 1, False, dtype, item))
        if pass_ != "bwd_weights":
            out += [_elementwise("gelu.fwd" if pass_ == "fwd" else "gelu.bwd", tokens, dtype, item),
                    _elementwise("add.fwd", tokens * d, dtype, item)]
    return tuple(out)
