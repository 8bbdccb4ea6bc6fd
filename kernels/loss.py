"""Softmax cross-entropy over the last axis, normalised by a GLOBAL element count so that partial
losses of a split batch sum to the global mean."""

from __future__ import annotations

from kernels.xp import module_of


def softmax_xent_forward(logits, labels, total_count):
    """logits (..., K), integer labels (...) -> (loss, cache).

    loss = sum over local elements of (logsumexp(logits) - logits[label]) / total_count, a 0-d array
    (accumulated in float64). Numerically stable (max subtracted).
    """
    xp = module_of(logits)
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    ez = xp.exp(z)
    s = ez.sum(axis=-1, keepdims=True)
    lab = labels[..., None]
    k = logits.shape[-1]
    # direct indexing: take_along_axis builds index grids in Python, a cost that rivals a small loss's own
    flat = z.reshape(-1, k)
    picked = flat[xp.arange(flat.shape[0]), labels.reshape(-1)].reshape(lab.shape)
    loss = (xp.log(s) - picked).astype(xp.float64).sum() / total_count
    return loss, {"p": ez / s, "labels": lab, "total": total_count}


def softmax_xent_backward(cache, dloss=1.0):
    """dlogits = (softmax - onehot(labels)) * dloss / total_count."""
    xp = module_of(cache["p"])
    p = cache["p"]
    onehot = xp.arange(p.shape[-1]) == cache["labels"]
    d = p - onehot.astype(p.dtype)
    d *= p.dtype.type(dloss / cache["total"])
    return d
