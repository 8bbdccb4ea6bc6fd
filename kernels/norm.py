"""Batch normalisation in stages (so a distributed executor can allreduce between them), and
layer normalisation.

Batch norm over all axes but 1 (channels) of (N, C, ...), training mode, biased variance:
  forward:  bn_local_sums -> stats [sum | sumsq | count] -> [allreduce stats in place] -> bn_forward_apply
  backward: bn_backward_local_sums -> sums [sum dy | sum dy*xhat] (and this shard's dgamma, dbeta)
            -> [allreduce sums in place] -> bn_backward_apply
  dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count)
Each stage's sums are ONE float64 buffer (the count in it), so the executor all-reduces it as it
is, and a device forms the statistics inside the apply (kernels.cuda.norm: two launches each way).
Float64 is exact enough to allreduce and to form var = E[x^2] - mean^2 without float32
cancellation; the applies compute in the input dtype.
"""

from __future__ import annotations

from kernels.dispatch import device_kernel
from kernels.xp import module_of


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bshape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


@device_kernel("batchnorm.local_sums")
def bn_local_sums(x):
    """stats: [sum_c (C) | sumsq_c (C) | element count per channel (1)] of this shard, float64."""
    xp = module_of(x)
    ax = _axes(x)
    xa = x.astype(xp.float64, copy=False)
    count = x.size // x.shape[1]
    return xp.concatenate([xa.sum(axis=ax), (xa * xa).sum(axis=ax), xp.asarray([float(count)])])


def bn_stats_from_sums(stats):
    """(mean, biased var, count) from (global) stats [sum | sumsq | count]."""
    xp = module_of(stats)
    c = (stats.shape[0] - 1) // 2
    count = stats[2 * c]
    mean = stats[:c] / count
    var = xp.maximum(stats[c:2 * c] / count - mean * mean, 0)
    return mean, var, count


def _xhat(cache):
    """The normalised input a backward stage reads: kept (this module's forward), or made again
    from the kept input and statistics (a device's forward that keeps those instead)."""
    if "xhat" in cache:
        return cache["xhat"], cache["invstd"], cache["count"]
    x = cache["x"]
    mean, var, count = bn_stats_from_sums(cache["stats"])
    invstd = (1.0 / module_of(x).sqrt(var + cache["eps"])).astype(x.dtype)
    return (x - mean.astype(x.dtype).reshape(_bshape(x))) * invstd.reshape(_bshape(x)), invstd, count


@device_kernel("batchnorm.fwd_apply")
def bn_forward_apply(x, stats, gamma, beta, eps=1e-5):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with the (global) ``stats``."""
    xp = module_of(x)
    bs = _bshape(x)
    mean, var, count = bn_stats_from_sums(stats)
    invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
    xhat = (x - mean.astype(x.dtype).reshape(bs)) * invstd.reshape(bs)
    y = xhat * gamma.astype(x.dtype).reshape(bs) + beta.astype(x.dtype).reshape(bs)
    return y, {"xhat": xhat, "invstd": invstd, "gamma": gamma, "count": count}


@device_kernel("batchnorm.bwd_local_sums")
def bn_backward_local_sums(dy, cache):
    """(sums [sum_dy_c | sum_dy_xhat_c] float64, dgamma, dbeta) of this shard; globally the sums
    are dbeta and dgamma. dgamma and dbeta (in gamma's dtype) stay local: the weight-gradient
    allreduce sums them."""
    xp = module_of(dy)
    ax = _axes(dy)
    dya = dy.astype(xp.float64, copy=False)
    sdy, sdyx = dya.sum(axis=ax), (dya * _xhat(cache)[0]).sum(axis=ax)
    pdt = cache["gamma"].dtype
    return xp.concatenate([sdy, sdyx]), sdyx.astype(pdt), sdy.astype(pdt)


@device_kernel("batchnorm.bwd_apply")
def bn_backward_apply(dy, cache, sums):
    """dx from the global ``sums`` [sum_dy | sum_dy_xhat] and the global per-channel count."""
    bs = _bshape(dy)
    dt = dy.dtype
    xhat, invstd, count = _xhat(cache)
    c = sums.shape[0] // 2
    scale = (cache["gamma"].astype(dt) * invstd).reshape(bs)
    mean_dy = (sums[:c] / count).astype(dt).reshape(bs)
    mean_dy_xhat = (sums[c:] / count).astype(dt).reshape(bs)
    return scale * (dy - mean_dy - xhat * mean_dy_xhat)


def batchnorm2d_forward(x, gamma, beta, eps=1e-5):
    """Single-device training-mode batch norm composed from the stages. Returns (y, cache)."""
    return bn_forward_apply(x, bn_local_sums(x), gamma, beta, eps)


def batchnorm2d_backward(dy, cache):
    """(dx, dgamma, dbeta) composed from the stages."""
    sums, dgamma, dbeta = bn_backward_local_sums(dy, cache)
    return bn_backward_apply(dy, cache, sums), dgamma, dbeta


@device_kernel("layernorm.fwd")
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """Normalise over the last axis (biased variance); gamma, beta of shape (D,). Returns (y, cache)."""
    xp = module_of(x)
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=-1, keepdims=True)
    invstd = 1.0 / xp.sqrt(var + eps)
    xhat = xc * invstd
    return xhat * gamma + beta, {"xhat": xhat, "invstd": invstd, "gamma": gamma}


@device_kernel("layernorm.bwd")
def layernorm_backward(dy, cache):
    """(dx, dgamma, dbeta)."""
    xhat, invstd, gamma = cache["xhat"], cache["invstd"], cache["gamma"]
    lead = tuple(range(dy.ndim - 1))
    dgamma = (dy * xhat).sum(axis=lead)
    dbeta = dy.sum(axis=lead)
    g = dy * gamma
    dx = invstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dgamma, dbeta


def rmsnorm_forward(x, gamma, eps=1e-5):
    """RMSNorm over the last axis (Zhang & Sennrich, NeurIPS 2019): ``gamma * x * r`` with
    ``r = (mean(x^2) + eps)^(-1/2)`` per row; gamma of shape (D,). Returns (y, cache). Keeps its
    input and ``r`` a row, as the cost model counts (networks.ops.norm.rms_costs); the cost model
    prices it on the layer-norm kernels."""
    xp = module_of(x)
    r = 1.0 / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    return x * r * gamma, {"x": x, "r": r, "gamma": gamma}


def rmsnorm_backward(dy, cache):
    """(dx, dgamma): ``dx = r (g - xhat mean(g xhat))`` with ``g = dy gamma`` and ``xhat = x r``
    per row (made again from the kept input)."""
    r, gamma = cache["r"], cache["gamma"]
    xhat = cache["x"] * r
    dgamma = (dy * xhat).sum(axis=tuple(range(dy.ndim - 1)))
    g = dy * gamma
    return r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)), dgamma
