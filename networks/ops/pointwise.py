"""Ops without weights that touch each element a fixed number of times: relu, gelu, dropout,
swiglu, add, concat, flatten. Work and depth: Ben-Nun & Hoefler, "Demystifying Parallel and
Distributed Deep Learning" (ACM Computing Surveys 2019), Table 4, activation (work NCHW, depth 1).
Element operation counts are this project's convention (relu 1/1, gelu 8/12, dropout 2/1, swiglu
5/11 per output element: :func:`swiglu_costs`)."""

from __future__ import annotations

from networks.ops.base import N, C, DimSplit, LayerCost, OpDef, Param, ShapeError, axes_of, elementwise_cost, need_float, need_rank, no_weights, prod


def same_infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 2, 3), "its input", "this op")
    need_float(dtypes[0], "this op")
    return in_shapes[0], dtypes[0]


def pointwise_splits(p, in_shapes, out_shape):
    shape = in_shapes[0]
    axes = axes_of(shape)
    out = []
    for dim, ax in axes.items():
        size = 0 if dim == N else shape[ax - 1]
        out.append(DimSplit(dim, size, tuple(ax for _ in in_shapes), ax))
    return tuple(out)


def _unary(name, doc, fwd, bwd, params=(), saves="inputs", mask_bytes=0):
    def costs(p, in_shapes, out_shape, n, itemsize):
        elems = n * prod(out_shape)
        return elementwise_cost(elems, itemsize, fwd, bwd, elems * mask_bytes)
    return OpDef(name, doc, params, (1, 1), same_infer, no_weights, costs, pointwise_splits, saves=saves)


# relu's gradient needs only its output (frameworks run it in place); gelu's needs its input;
# dropout keeps only its mask, one byte per element (PyTorch's bool mask)
RELU = _unary("relu", "max(x, 0)", 1, 1, saves="output")
GELU = _unary("gelu", "GELU (tanh approximation, as GPT-2)", 8, 12)
DROPOUT = _unary("dropout", "inverted dropout", 2, 1, (Param("rate", "rate", 0.1, "probability of zeroing"),),
                 saves="none", mask_bytes=1)


def swiglu_infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (1, 2), "its input", "swiglu")
    need_float(dtypes[0], "swiglu")
    if x[-1] % 2:
        raise ShapeError(f"swiglu needs an even number of input features (gate and up interleaved), got {x[-1]}",
                         "inputs", hint="give the linear before it twice the MLP width")
    return x[:-1] + (x[-1] // 2,), dtypes[0]


def swiglu_costs(p, in_shapes, out_shape, n, itemsize):
    """silu(gate) * up (Shazeer 2020, "GLU Variants Improve Transformer", SwiGLU), per output element:
    forward 5 operations (the sigmoid s = 1 / (1 + exp(-g)) as exp, add and reciprocal: 3; g * s;
    times u), backward 11 (s again: 3; g * s; du = dy * g * s; dy * u; silu'(g) = s * (1 + g * (1 - s)):
    4; dg = dy * u * silu'(g)). Reads gate and up (two elements per output), writes one; backward
    reads dy, gate and up and writes both gradients."""
    e = n * prod(out_shape)
    nb = e * itemsize
    return LayerCost(flops=(5 * e, 11 * e, 0), work=(e, e, 0), depth=(1, 1, 0), bytes_read=(2 * nb, 3 * nb, 0),
                     bytes_written=(nb, 2 * nb, 0), activation_bytes=0, macs=0)


def swiglu_splits(p, in_shapes, out_shape):
    """Every axis of the output; a feature split (C) cuts the input at the same pair boundaries, so
    its degree must divide the output width (Megatron: the product of two column-parallel halves)."""
    out = []
    for dim, ax in axes_of(out_shape).items():
        size = 0 if dim == N else out_shape[ax - 1]
        out.append(DimSplit(dim, size, (ax,), ax, divides=dim == C))
    return tuple(out)


# gate and up interleaved on the last axis (gate j at 2j, up j at 2j + 1): one linear of twice the
# width makes both (Megatron-LM's fused linear_fc1), and any feature split keeps each pair together
SWIGLU = OpDef("swiglu", "silu(gate) * up, gate and up interleaved on the last axis: (..., 2F) -> (..., F)",
               (), (1, 1), swiglu_infer, no_weights, swiglu_costs, swiglu_splits)

def add_infer(p, in_shapes, dtypes):
    first = in_shapes[0]
    need_rank(first, (1, 2, 3), "its input", "add")
    for k, shape in enumerate(in_shapes[1:], 1):
        if shape != first:
            raise ShapeError(f"cannot add shapes {tuple(first)} and {tuple(shape)} (input {k})", "inputs",
                             hint="both branches must produce the same shape")
    for d in dtypes:
        need_float(d, "add")
    return first, dtypes[0]


def add_costs(p, in_shapes, out_shape, n, itemsize):
    elems = n * prod(out_shape)
    return elementwise_cost(elems, itemsize, len(in_shapes) - 1, 0, 0,
                            n_inputs=len(in_shapes))


ADD = OpDef("add", "elementwise sum of inputs of equal shape (residual connections)", (), (2, None),
            add_infer, no_weights, add_costs, pointwise_splits, saves="none")


def concat_infer(p, in_shapes, dtypes):
    ax = p["axis"]
    first = in_shapes[0]
    if ax >= len(first):
        raise ShapeError(f"axis {ax} does not exist for per-sample shape {tuple(first)}", "axis")
    total = 0
    for k, shape in enumerate(in_shapes):
        if len(shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(shape, first)) if i != ax):
            raise ShapeError(f"cannot concatenate {tuple(first)} and {tuple(shape)} (input {k}) along axis {ax}",
                             "inputs")
        total += shape[ax]
    for d in dtypes:
        need_float(d, "concat")
    return first[:ax] + (total,) + first[ax + 1:], dtypes[0]


def concat_costs(p, in_shapes, out_shape, n, itemsize):
    elems = n * prod(out_shape)
    return elementwise_cost(elems, itemsize, 0, 0, 0)


def concat_splits(p, in_shapes, out_shape):
    # every dimension but the concatenated one splits all inputs and the output alike
    axes = axes_of(in_shapes[0])
    out = []
    for dim, ax in axes.items():
        if ax == p["axis"] + 1:
            continue
        size = 0 if dim == N else in_shapes[0][ax - 1]
        out.append(DimSplit(dim, size, tuple(ax for _ in in_shapes), ax))
    return tuple(out)


CONCAT = OpDef("concat", "concatenation along a per-sample axis (0: channels)",
               (Param("axis", "nonneg", 0, "per-sample axis to join along (0 = channels)"),), (2, None),
               concat_infer, no_weights, concat_costs, concat_splits, saves="none")


def flatten_infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 3), "its input", "flatten")
    return (prod(in_shapes[0]),), dtypes[0]


def flatten_costs(p, in_shapes, out_shape, n, itemsize):
    return elementwise_cost(n * prod(out_shape), itemsize, 0, 0, 0)


def flatten_splits(p, in_shapes, out_shape):
    c = in_shapes[0][0]
    # a channel split stays a contiguous block of features (needs C divisible by the degree)
    return (DimSplit(N, 0, (0,), 0), DimSplit(C, c, (1,), 1, divides=True))


FLATTEN = OpDef("flatten", "(C, H, W) -> (C*H*W,)", (), (1, 1), flatten_infer, no_weights,
                flatten_costs, flatten_splits, saves="none")
