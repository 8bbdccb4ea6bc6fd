"""softmax_cross_entropy: the training loss, mean over samples (and positions) of -log softmax.

Labels are implicit (synthetic). The output is one number for the whole batch, so a split over
samples or positions leaves partial sums that are all-reduced (one element)."""

from __future__ import annotations

from networks.ops.base import (DimSplit, ExtraComm, LayerCost, OpDef, clog2, need_float, need_rank, no_weights,
                               prod)


def infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 2), "its input (the logits)", "softmax_cross_entropy")
    need_float(dtypes[0], "softmax_cross_entropy")
    return (), "float32"


def costs(p, in_shapes, out_shape, n, itemsize):
    """Backward needs the log-probabilities, kept in float32 (frameworks compute the loss in
    float32 under mixed precision), not the logits (OpDef.saves none)."""
    elems = n * prod(in_shapes[0])
    k = in_shapes[0][-1]
    return LayerCost((5 * elems, 3 * elems, 0), (elems, elems, 0), (2 * clog2(k) + clog2(elems // k), 1, 0),
                     (elems * itemsize, elems * itemsize, 0), (4, elems * itemsize, 0), elems * 4, 0)


def splits(p, in_shapes, out_shape):
    """N and H leave partial sums of the loss. C splits the vocabulary of sequence logits (Megatron's
    vocabulary-parallel cross-entropy, Shoeybi et al. 2019, section 3): each rank holds a slice of
    every row's logits, and three all-reduces of one number a row (the row maximum, the sum of
    exponentials, the label's logit) give every rank the whole loss."""
    out = [DimSplit("N", 0, (0,), None, partial_out=True)]
    if len(in_shapes[0]) == 2:
        out.append(DimSplit("H", in_shapes[0][0], (1,), None, partial_out=True))
        out.append(DimSplit("C", in_shapes[0][1], (2,), None, extra=(ExtraComm("fwd", "allreduce", "rows", 3),)))
    return tuple(out)


OP = OpDef("softmax_cross_entropy", "softmax cross-entropy loss against (synthetic) labels", (), (1, 1),
           infer, no_weights, costs, splits, saves="none")
