"""Softmax cross-entropy over the last axis, normalised by a GLOBAL element count so that partial
losses of a split batch sum to the global mean.

Vocabulary-parallel (Megatron-LM's cross-entropy, Shoeybi et al. 2019, section 3): each shard holds
the logits of a slice of the vocabulary starting at ``vocab_lo``. The same forward kernel then also
returns, per row, the shard's log-sum-exp ``lse`` and the label's logit ``picked`` (0 where the
label is in another slice); three all-reduces of one number a row (the maximum of ``lse``, the sum
of ``exp(lse - max)``, the sum of ``picked``) give the whole row's log-sum-exp ``L``, and the
backward kernel scales the shard's probabilities by ``row_scale = exp(lse - L)`` (set in the cache
by the caller). :func:`combine_vocab_rows` is that arithmetic on the reduced numbers.
"""

from __future__ import annotations

from kernels.dispatch import device_kernel
from kernels.xp import module_of


@device_kernel("softmax_xent.fwd")
def softmax_xent_forward(logits, labels, total_count, vocab_lo=None):
    """logits (..., K), integer labels (...) -> (loss, cache).

    loss = sum over local elements of (logsumexp(logits) - logits[label]) / total_count, a 0-d array
    (accumulated in float64). Numerically stable (max subtracted). ``vocab_lo`` (an int): the logits
    are the vocabulary slice starting there; the cache then also holds the per-row ``lse`` and
    ``picked`` (float64, the shape of ``labels``) and the loss is the slice's own (not the row's).
    """
    xp = module_of(logits)
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    ez = xp.exp(z)
    s = ez.sum(axis=-1, keepdims=True)
    k = logits.shape[-1]
    lab = labels[..., None] if vocab_lo is None else labels[..., None] - vocab_lo
    inside = None if vocab_lo is None else (lab >= 0) & (lab < k)
    rows = lab.reshape(-1) if inside is None else xp.where(inside, lab, 0).reshape(-1)
    # direct indexing: take_along_axis builds index grids in Python, a cost that rivals a small loss's own
    flat = z.reshape(-1, k)
    picked = flat[xp.arange(flat.shape[0]), rows].reshape(lab.shape)
    log_s = xp.log(s)
    loss = (log_s - picked).astype(xp.float64).sum() / total_count
    cache = {"p": ez / s, "labels": lab, "total": total_count}
    if inside is not None:
        cache["lse"] = (log_s + m).astype(xp.float64)[..., 0]
        cache["picked"] = xp.where(inside, picked + m, 0).astype(xp.float64)[..., 0]
    return loss, cache


def combine_vocab_rows(lse, row_max, exp_sum, picked_sum, total_count):
    """From the all-reduced per-row numbers: (this shard's part of the loss, the rows' whole
    log-sum-exp, ``row_scale`` for the backward kernel). ``row_max``: the maximum of the shards'
    ``lse``; ``exp_sum``: the sum of ``exp(lse - row_max)``; ``picked_sum``: the label's logit."""
    xp = module_of(lse)
    whole = row_max + xp.log(exp_sum)
    return (whole - picked_sum).sum() / total_count, whole, xp.exp(lse - whole)


@device_kernel("softmax_xent.bwd")
def softmax_xent_backward(cache, dloss=1.0):
    """dlogits = (softmax - onehot(labels)) * dloss / total_count (the shard's probabilities scaled
    by the cache's ``row_scale`` when it has one: vocabulary-parallel)."""
    xp = module_of(cache["p"])
    p = cache["p"]
    onehot = xp.arange(p.shape[-1]) == cache["labels"]
    scale = cache.get("row_scale")
    d = (p if scale is None else p * scale[..., None].astype(p.dtype)) - onehot.astype(p.dtype)
    d *= p.dtype.type(dloss / cache["total"])
    return d
