"""Softmax cross-entropy on the GPU: one block per row forward (max, log-sum-exp, the label's
logit), one pass backward (``(exp(z - lse) [* row_scale] - onehot) * dloss / total``), in float32
whatever the logits' format (kernels.loss's signatures, vocabulary-parallel included).

The cache keeps the logits and each row's log-sum-exp instead of the probabilities (the same bytes;
the probabilities are recomputed in backward). Its ``lse`` and ``picked`` (float64, the labels'
shape) are the numpy kernel's, which the executor all-reduces for a vocabulary split; the
caller's ``row_scale`` is read the same way.
"""

from __future__ import annotations

from typing import Callable

from kernels.cuda import libs
from kernels.cuda.launch import f32, fits, i32, i64, run, run_grid


def _threads(k: int) -> int:
    return int(min(1024, max(32, ((k // 8 + 31) // 32) * 32)))


def softmax_xent_forward(logits, labels, total_count, vocab_lo=None, *, fallback: Callable):
    if not fits(logits):
        return fallback(logits, labels, total_count, vocab_lo)
    cp = libs.cupy()
    k = int(logits.shape[-1])
    rows = logits.size // k
    lab = cp.ascontiguousarray(labels.reshape(-1), dtype=cp.int64)
    row_loss, row_lse, picked = (cp.empty(rows, dtype=cp.float32) for _ in range(3))
    lo = 0 if vocab_lo is None else int(vocab_lo)
    run_grid("xent_fwd", logits.dtype.name, (rows,), (_threads(k),),
             (logits, lab, row_loss, row_lse, picked, i32(k), i64(lo)))
    loss = row_loss.astype(cp.float64).sum() / total_count
    cache = {"z": logits, "labels_flat": lab, "row_lse": row_lse, "total": total_count, "vocab_lo": lo}
    if vocab_lo is not None:
        cache["lse"] = row_lse.astype(cp.float64).reshape(labels.shape)
        cache["picked"] = picked.astype(cp.float64).reshape(labels.shape)
    return loss, cache


def softmax_xent_backward(cache, dloss=1.0, *, fallback: Callable):
    if "z" not in cache:
        return fallback(cache, dloss)
    cp = libs.cupy()
    z = cache["z"]
    k = int(z.shape[-1])
    scale = cache.get("row_scale")
    scaled = scale is not None
    scale32 = cp.ascontiguousarray(scale.reshape(-1), dtype=cp.float32) if scaled else cache["row_lse"]
    dz = cp.empty_like(z)
    run("xent_bwd", z.dtype.name, z.size,
        (z, cache["labels_flat"], cache["row_lse"], scale32, dz, i64(z.size), i32(k), i64(cache["vocab_lo"]),
         f32(float(dloss) / float(cache["total"])), i32(int(scaled))))
    return dz
