"""Token embedding (a gather from the token table, plus learned positions) and its weight
gradient (a scatter-add), on a shard.

``ids`` (N, S) integer token ids; ``tokens`` (Vl, Dl) the rows ``[vocab_lo, vocab_lo + Vl)`` of the
token table (all of it when unsplit; a vocabulary-parallel shard otherwise: ids outside the slice
look up zeros, and the partial outputs of the slices sum to the whole lookup); ``positions``
(S, Dl) the position rows of this shard's sequence block, or None (no positions, or another shard
of the vocabulary group adds them). Output (N, S, Dl) in the tables' dtype.

Not a timed kernel: the cost model prices the embedding by the compute model's fallback
(costmodel.calls.layer_calls lists no call for it), as a gather moves bytes and does no arithmetic.
The scatter-add sums repeated ids in index order (``numpy.add.at``), so it is deterministic.
"""

from __future__ import annotations

from kernels.dispatch import device_kernel
from kernels.xp import module_of


def _local_ids(ids, vocab_lo: int, rows: int):
    """(ids shifted into the shard, mask of the ids it holds), or (ids, None) for the whole table."""
    xp = module_of(ids)
    local = ids - vocab_lo if vocab_lo else ids
    if vocab_lo == 0 and rows > int(ids.max(initial=0)):
        return local, None
    mask = (local >= 0) & (local < rows)
    return xp.where(mask, local, 0), mask


@device_kernel("embedding.fwd")
def embedding_forward(ids, tokens, positions=None, vocab_lo: int = 0):
    """(y, cache): ``y[n, s] = tokens[ids[n, s] - vocab_lo] (+ positions[s])``."""
    xp = module_of(tokens)
    local, mask = _local_ids(ids, vocab_lo, tokens.shape[0])
    y = xp.take(tokens, local, axis=0)
    if mask is not None:
        y *= mask[..., None].astype(y.dtype)
    if positions is not None:
        y += positions
    return y, {"ids": local, "mask": mask, "rows": tokens.shape[0]}


@device_kernel("embedding.bwd_weights")
def embedding_backward_weights(dy, cache, dtokens=None, with_positions: bool = True):
    """(dtokens (Vl, Dl), dpositions (S, Dl) or None): the scatter-add of ``dy`` into the token rows
    its ids looked up, added INTO ``dtokens`` when given (a tied LM head's gradient of the same
    rows), else into zeros; ``dpositions`` is ``dy`` summed over the batch."""
    xp = module_of(dy)
    d = dy.shape[-1]
    if dtokens is None:
        dtokens = xp.zeros((cache["rows"], d), dtype=dy.dtype)
    flat = dy.reshape(-1, d)
    ids = cache["ids"].reshape(-1)
    if cache["mask"] is not None:
        keep = cache["mask"].reshape(-1)
        flat, ids = flat[keep], ids[keep]
    xp.add.at(dtokens, ids, flat.astype(dtokens.dtype, copy=False))
    dpositions = dy.sum(axis=0) if with_positions else None
    return dtokens, dpositions
