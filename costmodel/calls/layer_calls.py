"""The exact kernel invocations the executor makes for one layer, one pass, on the straggler's shard.

This is the single source of truth behind "the one kernel set" (docs/kernels.md; docs/profiler.md,
"What is timed"): the profiler times exactly these calls,
:class:`costmodel.compute.profiled.ProfiledCompute` looks up exactly these calls, and the executor
calls :data:`kernels.KERNELS` with exactly these shapes. Pure.

Each :class:`KernelCall` names a kernel of ``kernels.KERNELS`` and a flat integer shape
tuple whose meaning per kernel is :data:`SHAPE_FIELDS` (the names also say how the profiler
builds synthetic operands). ``flops`` follow the op catalogue's conventions, so for every op the
calls of a pass add up to ``costmodel.compute.roofline.local_cost(local).flops[pass]`` (exceptions, both
documented in docs/profiler.md: layernorm puts its dgamma/dbeta flops in ``bwd_data`` because one
kernel computes both; attention under a head or sequence split, where the catalogue counts
unsplit projections / a local-by-local score matrix but the kernels do less / more). rmsnorm, swiglu
and rotary positions have no kernel yet: they borrow kernels of the same traffic (:mod:`.kernel_proxies`).

Which kernel runs in which pass:

========================  ==========================  ===============================  ==========================
op                        fwd                         bwd_data                         bwd_weights
========================  ==========================  ===============================  ==========================
conv2d                    conv2d.fwd                  conv2d.bwd_data                  conv2d.bwd_weights
linear                    linear.fwd                  linear.bwd_data                  linear.bwd_weights
relu / gelu / dropout     <op>.fwd                    <op>.bwd                         -
add (k inputs)            add.fwd x (k-1)             add.bwd                          -
concat                    concat.fwd                  concat.bwd                       -
maxpool2d / avgpool2d     <op>.fwd                    <op>.bwd                         -
global_avgpool            global_avgpool.fwd          global_avgpool.bwd               -
batchnorm2d               batchnorm.local_sums,       batchnorm.bwd_apply              batchnorm.bwd_local_sums
                          batchnorm.fwd_apply                                          (= dgamma, dbeta)
layernorm                 layernorm.fwd               layernorm.bwd (with dgamma)      -
softmax_cross_entropy     softmax_xent.fwd            softmax_xent.bwd                 -
attention                 linear.fwd (qkv),           linear.bwd_data (out),           linear.bwd_weights (out),
(calls.attention)         attention.fwd,              attention.bwd,                   linear.bwd_weights (qkv)
                          linear.fwd (out)            linear.bwd_data (qkv)
moe (calls.moe)           linear.fwd (router,         linear.bwd_data, gelu.bwd,       linear.bwd_weights of each
                          experts), gelu.fwd, add.fwd add.fwd                          GEMM
flatten, embedding        -  (reshape / gather: no timed kernel; embedding uses the fallback)
========================  ==========================  ===============================  ==========================

A layer whose output ``k`` input slots read (a ResNet block's input feeds its first convolution
and its shortcut) also has ``k - 1`` gradient sums, ``add.fwd`` of its local output, in its
backward (:func:`grad_sum_calls`; they are not part of any pass above).
"""

from __future__ import annotations

from costmodel.calls.attention import attention_calls
from costmodel.calls.kernel_call import KernelCall, linear_call
from costmodel.calls.proxies import PROXY_OPS, proxy_calls
from costmodel.parallel.shard import LocalLayer
from costmodel.calls.moe import moe_calls
from networks.ir import DTYPE_BYTES

#: The convolution algorithm of a layer whose plan names none (uniform strategies, hand-written
#: plans, the executor's fallback): im2col + GEMM runs every convolution, any stride, dilation or groups.
DEFAULT_CONV_ALGORITHM = "im2col"
#: The passes a layer makes in a step: forward, the input's gradient, the weights' gradient
PASSES = ("fwd", "bwd_data", "bwd_weights")

def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _pads(total_pad: int, lo: int, split: bool, global_lo: int, global_hi: int) -> tuple[int, int]:
    """Padding of the straggler: the layer's own when the axis is not split, else the total the
    local window needs, placed at the low border first (the executor pads only at global borders)."""
    if not split:
        return global_lo, global_hi
    top = min(lo, total_pad)
    return top, total_pad - top


def _window_pad(size: int, out: int, k: int, s: int, d: int) -> int:
    return max(0, (out - 1) * s + d * (k - 1) + 1 - size)


def _conv_calls(local: LocalLayer, pass_: str, algo: str, dtype: str, item: int) -> tuple[KernelCall, ...]:
    p = local.p
    c, h, w = local.in_shapes[0]
    f, ho, wo = local.out_shape
    n = local.batch
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    hsplit = (h, ho) != (local.layer.in_shapes[0][1], local.layer.out_shape[1])
    wsplit = (w, wo) != (local.layer.in_shapes[0][2], local.layer.out_shape[2])
    pt, pb = _pads(_window_pad(h, ho, kh, sh, dh), ph, hsplit, ph, ph)
    pl, pr = _pads(_window_pad(w, wo, kw, sw, dw), pw, wsplit, pw, pw)
    groups, bias = p["groups"], int(bool(p["bias"]))
    shape = (n, c, h, w, f, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, groups, bias)
    macs = n * f * ho * wo * (c // groups) * kh * kw
    x_b, y_b, w_b = n * c * h * w * item, n * f * ho * wo * item, f * (c // groups) * kh * kw * item
    bias_f = n * f * ho * wo * bias
    flops, nbytes = {"fwd": (2 * macs + bias_f, x_b + w_b + y_b),
                     "bwd_data": (2 * macs, y_b + w_b + x_b),
                     "bwd_weights": (2 * macs + bias_f, y_b + x_b + w_b)}[pass_]
    return (KernelCall(f"conv2d.{pass_}", shape, dtype, algo or DEFAULT_CONV_ALGORITHM, flops, nbytes),)


def _linear_calls(local, pass_, dtype, item):
    x = local.in_shapes[0]
    rows = local.batch * _prod(x[:-1])
    kernel = {"fwd": "linear.fwd", "bwd_data": "linear.bwd_data", "bwd_weights": "linear.bwd_weights"}[pass_]
    return (linear_call(kernel, rows, x[-1], local.p["features"], local.p["bias"], dtype, item),)


def _pool_calls(local, pass_, dtype, item):
    p, op = local.p, local.layer.op
    c, h, w = local.in_shapes[0]
    _, ho, wo = local.out_shape
    n = local.batch
    kh, kw = p["kernel"]
    sh, sw = p["stride"] if p["stride"] is not None else p["kernel"]
    ph, pw = p["padding"]
    dh, dw = p["dilation"] if op == "maxpool2d" else (1, 1)
    hsplit = (h, ho) != (local.layer.in_shapes[0][1], local.layer.out_shape[1])
    wsplit = (w, wo) != (local.layer.in_shapes[0][2], local.layer.out_shape[2])
    ceil = int(bool(p["ceil_mode"])) and not (hsplit or wsplit)
    pt, pb = _pads(_window_pad(h, ho, kh, sh, dh), ph, hsplit, ph, ph)
    pl, pr = _pads(_window_pad(w, wo, kw, sw, dw), pw, wsplit, pw, pw)
    shape = (n, c, h, w, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, int(ceil))
    if op == "avgpool2d":
        shape += (int(bool(p["count_include_pad"])),)
    xin, yout = n * c * h * w, n * c * ho * wo
    if pass_ == "fwd":
        return (KernelCall(f"{op}.fwd", shape, dtype, "", yout * kh * kw, (xin + yout) * item),)
    if pass_ == "bwd_data":
        return (KernelCall(f"{op}.bwd", shape, dtype, "", xin, (xin + yout) * item),)
    return ()


def _elementwise_calls(local, pass_, dtype, item):
    op = local.layer.op
    elems = local.batch * _prod(local.out_shape)
    nb = elems * item
    if op == "add":
        k = len(local.in_shapes)
        if pass_ == "fwd":
            return tuple(add_call(elems, dtype) for _ in range(k - 1))
        return (KernelCall("add.bwd", (elems,), dtype, "", 0, nb),) if pass_ == "bwd_data" else ()
    if op == "concat":
        if pass_ == "bwd_weights":
            return ()
        axis = local.p["axis"] + 1  # batched
        full = (local.batch, *local.out_shape)
        outer, inner = _prod(full[:axis]), _prod(full[axis + 1:])
        sizes = tuple(s[axis - 1] for s in local.in_shapes)
        kernel = "concat.fwd" if pass_ == "fwd" else "concat.bwd"
        return (KernelCall(kernel, (outer, inner, *sizes), dtype, "", 0, 2 * nb),)
    fwd_ops, bwd_ops = {"relu": (1, 1), "gelu": (8, 12), "dropout": (2, 1)}[op]
    if pass_ == "fwd":
        return (KernelCall(f"{op}.fwd", (elems,), dtype, "", fwd_ops * elems, 2 * nb),)
    if pass_ == "bwd_data":
        return (KernelCall(f"{op}.bwd", (elems,), dtype, "", bwd_ops * elems, 3 * nb),)
    return ()


def _norm_calls(local, pass_, dtype, item):
    op = local.layer.op
    if op == "global_avgpool":
        c, h, w = local.in_shapes[0]
        shape = (local.batch, c, h, w)
        elems = _prod(shape)
        kern = {"fwd": "global_avgpool.fwd", "bwd_data": "global_avgpool.bwd"}.get(pass_)
        return (KernelCall(kern, shape, dtype, "", elems, elems * item),) if kern else ()
    if op == "batchnorm2d":
        shape = (local.batch, *local.in_shapes[0])
        e = _prod(shape)
        nb = e * item
        if pass_ == "fwd":
            return (KernelCall("batchnorm.local_sums", shape, dtype, "", 2 * e, nb),
                    KernelCall("batchnorm.fwd_apply", shape, dtype, "", 5 * e, 2 * nb))
        if pass_ == "bwd_data":
            return (KernelCall("batchnorm.bwd_apply", shape, dtype, "", 10 * e, 3 * nb),)
        return (KernelCall("batchnorm.bwd_local_sums", shape, dtype, "", 2 * e, 2 * nb),)
    # layernorm
    x = local.in_shapes[0]
    rows, d = local.batch * _prod(x[:-1]), x[-1]
    e = rows * d
    if pass_ == "fwd":
        return (KernelCall("layernorm.fwd", (rows, d), dtype, "", 7 * e, 2 * e * item),)
    if pass_ == "bwd_data":
        return (KernelCall("layernorm.bwd", (rows, d), dtype, "", 12 * e, 3 * e * item),)
    return ()


def _loss_calls(local, pass_, dtype, item):
    x = local.in_shapes[0]
    rows, k = local.batch * _prod(x[:-1]), x[-1]
    e = rows * k
    if pass_ == "fwd":
        return (KernelCall("softmax_xent.fwd", (rows, k), dtype, "", 5 * e, e * item),)
    if pass_ == "bwd_data":
        return (KernelCall("softmax_xent.bwd", (rows, k), dtype, "", 3 * e, 2 * e * item),)
    return ()


def backward_calls(local: LocalLayer, algorithm: str = "") -> tuple[KernelCall, ...]:
    """The kernel invocations of a local shard's backward pass in the executor's order: the input
    gradient, then the weight gradient of a layer with weights."""
    passes = ("bwd_data", "bwd_weights") if local.layer.has_weight_grad else ("bwd_data",)
    return tuple(c for pass_ in passes for c in kernel_calls(local, pass_, algorithm))


def kernel_calls(local: LocalLayer, pass_: str, algorithm: str = "",
                 sram_bytes: int | None = None) -> tuple[KernelCall, ...]:
    """The kernel invocations of ``pass_`` ("fwd", "bwd_data", "bwd_weights") of a local shard.

    ``algorithm`` is the convolution algorithm ("" means im2col) or the attention algorithm ("" or
    ``materialized``; ``flash`` counts its work from the device's on-chip memory per SM,
    ``sram_bytes``, or from FlashAttention-2's largest tile where no datasheet prices the call,
    ``None``: :mod:`costmodel.calls.attention`); other ops ignore it. Ops without a timed kernel (flatten,
    embedding) return ``()``.
    """
    if pass_ not in ("fwd", "bwd_data", "bwd_weights"):
        raise ValueError(f"unknown pass {pass_!r}")
    op = local.layer.op
    dtype = local.layer.dtype
    item = DTYPE_BYTES.get(dtype, 4)
    if op == "conv2d":
        return _conv_calls(local, pass_, algorithm, dtype, item)
    if op == "linear":
        return _linear_calls(local, pass_, dtype, item)
    if op in ("maxpool2d", "avgpool2d"):
        return _pool_calls(local, pass_, dtype, item)
    if op in ("relu", "gelu", "dropout", "add", "concat"):
        return _elementwise_calls(local, pass_, dtype, item)
    if op in ("global_avgpool", "batchnorm2d", "layernorm", "rmsnorm"):  # rmsnorm: layernorm's (kernel_proxies)
        return _norm_calls(local, pass_, dtype, item)
    if op in PROXY_OPS:  # no kernel of its own yet (costmodel.calls.proxies)
        return tuple(KernelCall(k, s, dtype, "", f, b) for k, s, f, b in proxy_calls(local, pass_, item))
    if op == "softmax_cross_entropy":
        return _loss_calls(local, pass_, dtype, item)
    if op == "attention":
        return attention_calls(local, pass_, dtype, item, algorithm, sram_bytes)
    if op == "moe":  # no kernels of its own yet: GEMMs and elementwise proxies (costmodel.calls.moe)
        return moe_calls(local, pass_, dtype, item)
    return ()


def add_call(elems: int, dtype: str) -> KernelCall:
    """``a + b`` into a new array of ``elems`` elements (reads two, writes one; 1 FLOP each)."""
    return KernelCall("add.fwd", (int(elems),), dtype, "", int(elems), 3 * int(elems) * DTYPE_BYTES.get(dtype, 4))


def grad_sum_calls(local: LocalLayer, consumers: int) -> tuple[KernelCall, ...]:
    """Summing the gradients of an output that ``consumers`` input slots read: the executor adds
    each consumer's gradient (in the producer's owned layout, after the reshard back) to the sum of
    those before it, one ``add.fwd`` of the local output per consumer after the first."""
    elems = local.batch * _prod(local.out_shape)
    return tuple(add_call(elems, local.layer.dtype) for _ in range(max(0, consumers - 1)))


def update_calls(local: LocalLayer) -> tuple[KernelCall, ...]:
    """The optimiser step of a local shard: one SGD-with-momentum update per weight tensor (reads
    weight, gradient and momentum, writes weight and momentum; 3 FLOPs per element)."""
    dtype = local.layer.dtype
    item = DTYPE_BYTES.get(dtype, 4)
    out = []
    for _, shape in local.weight_shapes:
        n = 1
        for s in shape:
            n *= s
        out.append(KernelCall("sgd.update", (n,), dtype, "", 3 * n, 5 * n * item))
    return tuple(out)


def dtype_for_itemsize(itemsize: int) -> str:
    """The dtype a kernel is looked up with when only its element size is known."""
    return {8: "float64", 4: "float32", 2: "float16"}.get(int(itemsize), "float32")


def reshard_copy_call(elems: int, run: int, dtype: str, accumulate: bool) -> KernelCall:
    """The block copy of ``elems`` elements in contiguous runs of ``run`` (``accumulate``: added into
    the destination, as backward halo gradients are): the cost model's term for a reshard's local
    copy, packing and unpacking (:func:`costmodel.layer.edge.reshard_copy_s`)."""
    item = DTYPE_BYTES.get(dtype, 4)
    run = max(1, min(int(run), int(elems)))
    outer = -(-int(elems) // run)
    n = outer * run
    if accumulate:
        return KernelCall("reshard.add", (outer, run), dtype, "", n, 3 * n * item)
    return KernelCall("reshard.copy", (outer, run), dtype, "", 0, 2 * n * item)
