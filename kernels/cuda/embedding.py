"""The token embedding on the GPU: the gather (with positions) in one pass, the weight gradient as
float32 atomic adds into the rows, rounded to the table's format (kernels.embedding's signatures
and semantics: ids outside a vocabulary shard look up zeros and give no gradient).

Atomic adds sum repeated ids in no fixed order, so the gradient is not bit-reproducible as the
numpy kernel's ``add.at`` is (its float32 sum differs by rounding only).
"""

from __future__ import annotations

from typing import Callable

from kernels.cuda import libs
from kernels.cuda.launch import fits, from_float32, i32, i64, run
from kernels.cuda.reduce import column_sums


def embedding_forward(ids, tokens, positions=None, vocab_lo: int = 0, *, fallback: Callable):
    if not fits(tokens) or (positions is not None and not fits(tokens, positions)):
        return fallback(ids, tokens, positions, vocab_lo)
    cp = libs.cupy()
    ids64 = cp.ascontiguousarray(ids, dtype=cp.int64)
    rows, d = (int(v) for v in tokens.shape)
    s = int(ids.shape[-1]) if ids.ndim > 1 else int(ids.shape[0])
    y = cp.empty((*ids.shape, d), dtype=tokens.dtype)
    pos = positions if positions is not None else tokens
    run("embed_fwd", tokens.dtype.name, y.size, (ids64, tokens, pos, y, i64(y.size), i32(s), i32(d), i64(vocab_lo),
                                                  i64(rows), i32(int(positions is not None))))
    return y, {"ids": ids64, "lo": int(vocab_lo), "rows": rows, "shape": tuple(ids.shape)}


def embedding_backward_weights(dy, cache, dtokens=None, with_positions: bool = True, *, fallback: Callable):
    if "lo" not in cache or not fits(dy):
        return fallback(dy, cache, dtokens, with_positions)
    cp = libs.cupy()
    d = int(dy.shape[-1])
    acc = cp.zeros((cache["rows"], d), dtype=cp.float32)
    run("embed_bwd", dy.dtype.name, dy.size, (cache["ids"], dy, acc, i64(dy.size), i32(d), i64(cache["lo"]),
                                              i64(cache["rows"])))
    grad = from_float32(acc, dy.dtype)
    if dtokens is not None:  # a tied head's gradient of the same rows: added into it
        if fits(dtokens, grad):
            run("add2", grad.dtype.name, grad.size, (dtokens, grad, dtokens, i64(grad.size)))
        else:
            dtokens += grad.astype(dtokens.dtype)
        grad = dtokens
    dpos = None
    if with_positions:
        n = int(dy.shape[0])
        dpos = from_float32(column_sums(dy.reshape(n, -1))[0], dy.dtype).reshape(dy.shape[1:])
    return grad, dpos
