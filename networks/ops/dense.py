"""linear (fully connected, on the last axis) and embedding (token and learned position tables).

Work and depth of linear follow Ben-Nun & Hoefler, "Demystifying Parallel and Distributed Deep
Learning" (ACM Computing Surveys 2019), Table 4 (fully connected): work Cout*Cin*N per pass, depth
log Cin (forward), log Cout (backward-data), log N (backward-weights, a reduction over the batch).
"""

from __future__ import annotations

from networks.ops.base import N, H, C, F, DimSplit, LayerCost, OpDef, Param, ShapeError, clog2, elementwise_cost, need_float, need_rank, prod

LINEAR_PARAMS = (
    Param("features", "pos", doc="output features F"),
    Param("bias", "bool", True, "add a learned bias"),
    Param("tied_to", "str", None, "an embedding layer whose token table this layer reuses (weight tying)"),
)


def linear_infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (1, 2), "its input", "linear")
    need_float(dtypes[0], "linear")
    return x[:-1] + (p["features"],), dtypes[0]


def linear_weights(p, in_shapes):
    c = in_shapes[0][-1]
    out = {} if p["tied_to"] else {"weight": (p["features"], c)}
    if p["bias"]:
        out["bias"] = (p["features"],)
    return out


def linear_costs(p, in_shapes, out_shape, n, itemsize):
    x = in_shapes[0]
    c, f = x[-1], p["features"]
    rows = n * prod(x[:-1])
    macs = rows * c * f
    bias = rows * f if p["bias"] else 0
    xb, yb, wb = rows * c * itemsize, rows * f * itemsize, (c * f + (f if p["bias"] else 0)) * itemsize
    return LayerCost(
        flops=(2 * macs + bias, 2 * macs, 2 * macs + bias),
        work=(macs, macs, macs),
        depth=(clog2(c), clog2(f), clog2(rows)),
        bytes_read=(xb + wb, yb + wb, yb + xb),
        bytes_written=(yb, xb, wb),
        activation_bytes=0,  # saves its input (OpDef.saves)
        macs=macs,
    )


def linear_splits(p, in_shapes, out_shape):
    x = in_shapes[0]
    last = len(x)  # batched axis of the feature dimension
    wts = ("weight",) + tuple(w for w in ("bias",) if w in linear_weights(p, in_shapes))  # tied: a stage's copy
    out = [DimSplit(N, 0, (0,), 0, partial_weight_grad=wts)]
    if len(x) == 2:
        out.append(DimSplit(H, x[0], (1,), 1, partial_weight_grad=wts))
    bias_axes = (("bias", 0),) if p["bias"] else ()
    if not p["tied_to"]:
        out.append(DimSplit(C, x[-1], (last,), None, weight_axes=(("weight", 1),), partial_out=True,
                            partial_weight_grad=("bias",) if p["bias"] else ()))
        out.append(DimSplit(F, p["features"], (None,), last, weight_axes=(("weight", 0),) + bias_axes,
                            partial_in_grad=True))
    else:  # a tied LM head split over the vocabulary uses the matching rows of the embedding's table;
        # on another pipeline stage than its embedding it holds a copy of it as its ``weight``
        # (costmodel.step.pipeline.stage_network), split and synchronised as an untied head's
        out.append(DimSplit(F, p["features"], (None,), last, weight_axes=(("weight", 0),) + bias_axes,
                            partial_in_grad=True))
    return tuple(out)


LINEAR = OpDef("linear", "fully connected layer on the last axis", LINEAR_PARAMS, (1, 1),
               linear_infer, linear_weights, linear_costs, linear_splits)


EMB_PARAMS = (
    Param("vocab", "pos", doc="number of tokens in the vocabulary"),
    Param("dim", "pos", doc="embedding width D"),
    Param("positions", "nonneg", 0, "learned position embeddings (0: none); the sequence must fit"),
)


def emb_infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (1,), "its input", "embedding")
    if not dtypes[0].startswith("int"):
        raise ShapeError(f"embedding needs integer token ids, got {dtypes[0]}", "inputs")
    if p["positions"] and x[0] > p["positions"]:
        raise ShapeError(f"sequence length {x[0]} exceeds the {p['positions']} learned positions",
                         "positions", hint=f"a sequence of {p['positions']} or less (--seq): the table of learned "
                                           "positions has no row for a later token")
    return (x[0], p["dim"]), "float32"


def emb_weights(p, in_shapes):
    out = {"tokens": (p["vocab"], p["dim"])}
    if p["positions"]:
        out["positions"] = (p["positions"], p["dim"])
    return out


def emb_costs(p, in_shapes, out_shape, n, itemsize):
    elems = n * prod(out_shape)
    cost = elementwise_cost(elems, itemsize, 1 if p["positions"] else 0, 0, 0)
    # backward-weights is a scatter-add of the output gradient into the tables
    return LayerCost(cost.flops[:2] + (elems * (2 if p["positions"] else 1),), (elems, 0, elems),
                     (1, 0, clog2(n)), cost.bytes_read, cost.bytes_written, cost.activation_bytes, 0)


def emb_splits(p, in_shapes, out_shape):
    wts = tuple(emb_weights(p, in_shapes))
    f_axes = tuple((w, 1) for w in wts)
    # C: Megatron's vocabulary-parallel embedding. Each rank holds a slice of the token table, looks
    # up the tokens that fall in it (zeros elsewhere), and the partial outputs are all-reduced. The
    # position table stays whole: its gradient comes from the all-reduced output gradient, the same
    # on every rank of the group, so it needs no sum.
    return (DimSplit(N, 0, (0,), 0, partial_weight_grad=wts),
            DimSplit(H, in_shapes[0][0], (1,), 1, partial_weight_grad=wts),
            DimSplit(C, p["vocab"], (None,), None, weight_axes=(("tokens", 0),), partial_out=True),
            DimSplit(F, p["dim"], (None,), 2, weight_axes=f_axes))


EMBEDDING = OpDef("embedding", "token embedding (plus learned positions)", EMB_PARAMS, (1, 1),
                  emb_infer, emb_weights, emb_costs, emb_splits, saves="none")
