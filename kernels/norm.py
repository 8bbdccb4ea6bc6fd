"""Batch normalisation in stages (so a distributed executor can allreduce between them), and
layer normalisation.

Batch norm over all axes but 1 (channels) of (N, C, ...), training mode, biased variance:
  forward:  bn_local_sums -> [allreduce sum, sumsq, count] -> bn_stats_from_sums -> bn_forward_apply
  backward: bn_backward_local_sums -> [allreduce] -> bn_backward_apply;  dgamma = sum_dy_xhat, dbeta = sum_dy
  dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count)
Per-channel sums are accumulated and returned in float64 (exact enough to allreduce and to form
var = E[x^2] - mean^2 without float32 cancellation); the applies compute in the input dtype.
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
    """(sum_c, sumsq_c, count): per-channel sum and sum of squares of this shard, element count."""
    xp = module_of(x)
    ax = _axes(x)
    xa = x.astype(xp.float64, copy=False)
    count = x.size // x.shape[1]
    return xa.sum(axis=ax), (xa * xa).sum(axis=ax), count


def bn_stats_from_sums(sum_c, sumsq_c, count):
    """(mean, biased var) from global sums."""
    xp = module_of(sum_c)
    mean = sum_c / count
    var = xp.maximum(sumsq_c / count - mean * mean, 0)
    return mean, var


@device_kernel("batchnorm.fwd_apply")
def bn_forward_apply(x, mean, var, gamma, beta, eps=1e-5):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with given (global) statistics."""
    xp = module_of(x)
    bs = _bshape(x)
    invstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
    xhat = (x - mean.astype(x.dtype).reshape(bs)) * invstd.reshape(bs)
    y = xhat * gamma.astype(x.dtype).reshape(bs) + beta.astype(x.dtype).reshape(bs)
    return y, {"xhat": xhat, "invstd": invstd, "gamma": gamma}


@device_kernel("batchnorm.bwd_local_sums")
def bn_backward_local_sums(dy, cache):
    """(sum_dy_c, sum_dy_xhat_c) of this shard (float64); globally they are dbeta and dgamma."""
    xp = module_of(dy)
    ax = _axes(dy)
    dya = dy.astype(xp.float64, copy=False)
    return dya.sum(axis=ax), (dya * cache["xhat"]).sum(axis=ax)


@device_kernel("batchnorm.bwd_apply")
def bn_backward_apply(dy, cache, sum_dy, sum_dy_xhat, count, gamma):
    """dx from global sums and the global per-channel element count."""
    bs = _bshape(dy)
    dt = dy.dtype
    scale = (gamma.astype(dt) * cache["invstd"]).reshape(bs)
    mean_dy = (sum_dy / count).astype(dt).reshape(bs)
    mean_dy_xhat = (sum_dy_xhat / count).astype(dt).reshape(bs)
    return scale * (dy - mean_dy - cache["xhat"] * mean_dy_xhat)


def batchnorm2d_forward(x, gamma, beta, eps=1e-5):
    """Single-device training-mode batch norm composed from the stages. Returns (y, cache)."""
    s, ss, count = bn_local_sums(x)
    mean, var = bn_stats_from_sums(s, ss, count)
    y, cache = bn_forward_apply(x, mean, var, gamma, beta, eps)
    cache.update(count=count, mean=mean, var=var)
    return y, cache


def batchnorm2d_backward(dy, cache):
    """(dx, dgamma, dbeta) composed from the stages."""
    sdy, sdyx = bn_backward_local_sums(dy, cache)
    dx = bn_backward_apply(dy, cache, sdy, sdyx, cache["count"], cache["gamma"])
    pdt = cache["gamma"].dtype
    return dx, sdyx.astype(pdt), sdy.astype(pdt)


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
