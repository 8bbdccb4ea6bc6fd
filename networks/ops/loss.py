"""softmax_cross_entropy: the training loss, mean over samples (and positions) of -log softmax.

Labels are implicit (synthetic). The output is one number for the whole batch, so a split over
samples or positions leaves partial sums that are all-reduced (one element).

What backward keeps: by default the log-probabilities in float32 (PyTorch's and Megatron-LM's
unfused cross-entropy upcast the logits and save their softmax), four bytes an element whatever the
logits' precision; with ``fused`` (Transformer Engine's ``parallel_cross_entropy``, Megatron-Core's
``cross_entropy_fusion_impl: te``) the logits themselves in their own precision and three float32
numbers a row (the row's maximum, its sum of exponentials and the label's logit:
transformer_engine/pytorch/cross_entropy.py saves ``_input`` and ``m_d_X_y``)."""

from __future__ import annotations

from networks.ops.base import N, H, C, DimSplit, ExtraComm, LayerCost, OpDef, Param, clog2, need_float, need_rank, no_weights, prod

PARAMS = (Param("fused", "bool", False, "one fused kernel keeping the logits in their own precision (Transformer "
                                        "Engine's parallel_cross_entropy), not float32 log-probabilities"),)


def infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 2), "its input (the logits)", "softmax_cross_entropy")
    need_float(dtypes[0], "softmax_cross_entropy")
    return (), "float32"


def costs(p, in_shapes, out_shape, n, itemsize):
    """Backward needs the log-probabilities, kept in float32 (frameworks compute the loss in
    float32 under mixed precision), not the logits (OpDef.saves none); ``fused``: the logits and
    three float32 numbers a row (module docstring)."""
    elems = n * prod(in_shapes[0])
    k = in_shapes[0][-1]
    kept = elems * itemsize + 12 * (elems // k) if p.get("fused") else elems * 4
    return LayerCost((5 * elems, 3 * elems, 0), (elems, elems, 0), (2 * clog2(k) + clog2(elems // k), 1, 0),
                     (elems * itemsize, elems * itemsize, 0), (4, elems * itemsize, 0), kept, 0)


def splits(p, in_shapes, out_shape):
    """N and H leave partial sums of the loss. C splits the vocabulary of sequence logits (Megatron's
    vocabulary-parallel cross-entropy, Shoeybi et al. 2019, section 3): each rank holds a slice of
    every row's logits, and three all-reduces of one number a row (the row maximum, the sum of
    exponentials, the label's logit) give every rank the whole loss."""
    out = [DimSplit(N, 0, (0,), None, partial_out=True)]
    if len(in_shapes[0]) == 2:
        out.append(DimSplit(H, in_shapes[0][0], (1,), None, partial_out=True))
        out.append(DimSplit(C, in_shapes[0][1], (2,), None, extra=(ExtraComm("fwd", "allreduce", "rows", 3),)))
    return tuple(out)


OP = OpDef("softmax_cross_entropy", "softmax cross-entropy loss against (synthetic) labels", PARAMS, (1, 1),
           infer, no_weights, costs, splits, saves="none")
