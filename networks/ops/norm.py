"""batchnorm2d (training-mode batch statistics), layernorm and rmsnorm (over the last axis).

Work and depth: Ben-Nun & Hoefler, "Demystifying Parallel and Distributed Deep Learning" (ACM
Computing Surveys 2019), Table 4, batch normalisation (work NCHW per pass, depth logarithmic in the
number of values each statistic reduces over; the table writes O(log N) with N that count).
Element operation counts (7 forward, 10 backward) are this project's convention; rmsnorm's
(4 forward, 7 backward-data, 2 backward-weights) are counted the same way without the mean and beta
(:func:`rms_costs`).
"""

from __future__ import annotations

from networks.ops.base import N, H, W, C, DimSplit, ExtraComm, OpDef, Param, clog2, elementwise_cost, need_float, need_rank, prod

NORM_PARAMS = (Param("eps", "float", 1e-5, "added to the variance"),
               Param("momentum", "rate", 0.1, "running-statistics momentum (inference only)"))


def bn_infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (3,), "its input", "batchnorm2d")
    need_float(dtypes[0], "batchnorm2d")
    return in_shapes[0], dtypes[0]


def bn_weights(p, in_shapes):
    c = in_shapes[0][0]
    return {"gamma": (c,), "beta": (c,)}


def bn_costs(p, in_shapes, out_shape, n, itemsize):
    c, h, w = in_shapes[0]
    elems = n * c * h * w
    # kept besides its input: the per-channel mean and inverse deviation, in float32
    cost = elementwise_cost(elems, itemsize, 7, 10, 2 * c * 4, clog2(n * h * w), clog2(n * h * w))
    return cost.__class__(cost.flops[:2] + (2 * elems,), cost.work[:2] + (elems,),
                          cost.depth[:2] + (clog2(n * h * w),), cost.bytes_read, cost.bytes_written,
                          cost.activation_bytes, 0)


#: The layer parameter costmodel.choices.batch_norm.with_batch_norm sets False for statistics over each
#: rank's own samples (PyTorch DDP's BatchNorm2d); absent, the statistics span the batch (SyncBatchNorm)
SYNC = "sync"


def synced(p: dict) -> bool:
    """Whether a batchnorm2d layer's statistics span the whole batch (its N split all-reduces them)."""
    return bool(p.get(SYNC, True))


def bn_splits(p, in_shapes, out_shape):
    c, h, w = in_shapes[0]
    wts = ("gamma", "beta")
    # statistics (sum and sum of squares per channel) are all-reduced over every rank that holds
    # the same channels, forward and backward, so results equal the single-process ones; unsynced
    # (local), over the H and W splits only: the ranks holding parts of the same samples
    stats = (ExtraComm("fwd", "allreduce", "channels", 2), ExtraComm("bwd", "allreduce", "channels", 2))
    return (DimSplit(N, 0, (0,), 0, partial_weight_grad=wts, extra=stats if synced(p) else ()),
            DimSplit(C, c, (1,), 1, weight_axes=(("gamma", 0), ("beta", 0))),
            DimSplit(H, h, (2,), 2, partial_weight_grad=wts, extra=stats),
            DimSplit(W, w, (3,), 3, partial_weight_grad=wts, extra=stats))


BATCHNORM = OpDef("batchnorm2d", "batch normalisation over (C, H, W) inputs", NORM_PARAMS, (1, 1),
                  bn_infer, bn_weights, bn_costs, bn_splits, stats_axis=1)


def ln_infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 2), "its input", "layernorm")
    need_float(dtypes[0], "layernorm")
    return in_shapes[0], dtypes[0]


def ln_weights(p, in_shapes):
    d = in_shapes[0][-1]
    return {"gamma": (d,), "beta": (d,)}


def ln_costs(p, in_shapes, out_shape, n, itemsize):
    elems = n * prod(in_shapes[0])
    d = in_shapes[0][-1]
    # kept besides its input: the per-row mean and inverse deviation, in float32
    cost = elementwise_cost(elems, itemsize, 7, 10, 2 * (elems // d) * 4, clog2(d), clog2(d))
    return cost.__class__(cost.flops[:2] + (2 * elems,), cost.work[:2] + (elems,),
                          cost.depth[:2] + (clog2(elems // d),), cost.bytes_read, cost.bytes_written,
                          cost.activation_bytes, 0)


def ln_splits(p, in_shapes, out_shape):
    wts = ("gamma", "beta")
    out = [DimSplit(N, 0, (0,), 0, partial_weight_grad=wts)]
    if len(in_shapes[0]) == 2:
        out.append(DimSplit(H, in_shapes[0][0], (1,), 1, partial_weight_grad=wts))
    return tuple(out)


LAYERNORM = OpDef("layernorm", "layer normalisation over the last axis", (Param("eps", "float", 1e-5,
                  "added to the variance"),), (1, 1), ln_infer, ln_weights, ln_costs, ln_splits)


def rms_infer(p, in_shapes, dtypes):
    need_rank(in_shapes[0], (1, 2), "its input", "rmsnorm")
    need_float(dtypes[0], "rmsnorm")
    return in_shapes[0], dtypes[0]


def rms_weights(p, in_shapes):
    return {"gamma": (in_shapes[0][-1],)}


def rms_costs(p, in_shapes, out_shape, n, itemsize):
    """RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019):
    y = gamma * x * r, r = (mean(x^2) + eps)^(-1/2) per row. Operations per element, counted as
    layernorm's 7/10 are: forward 4 (square, sum, times r, times gamma); backward-data 7 (x * r again,
    dy * gamma, times x * r, sum, x * r times that row sum over D, subtract, times r); backward-weights
    2 (dy * x * r, summed over the rows). Kept besides its input: r per row, in float32."""
    elems = n * prod(in_shapes[0])
    d = in_shapes[0][-1]
    rows = elems // d
    cost = elementwise_cost(elems, itemsize, 4, 7, rows * 4, clog2(d), clog2(d))
    return cost.__class__(cost.flops[:2] + (2 * elems,), cost.work[:2] + (elems,),
                          cost.depth[:2] + (clog2(rows),), cost.bytes_read, cost.bytes_written,
                          cost.activation_bytes, 0)


def rms_splits(p, in_shapes, out_shape):
    out = [DimSplit(N, 0, (0,), 0, partial_weight_grad=("gamma",))]
    if len(in_shapes[0]) == 2:
        out.append(DimSplit(H, in_shapes[0][0], (1,), 1, partial_weight_grad=("gamma",)))
    return tuple(out)


RMSNORM = OpDef("rmsnorm", "root-mean-square normalisation over the last axis (no mean, no beta)",
                (Param("eps", "float", 1e-5, "added to the mean square"),), (1, 1), rms_infer, rms_weights,
                rms_costs, rms_splits)
