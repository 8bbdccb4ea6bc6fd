"""The reference step's batch normalisation over sample shards (--batch-norm local,
costmodel.choices.batch_norm): an unsynchronised layer takes each rank's statistics over the samples that
rank holds, so the single process normalises each shard of rows by its own statistics, as the ranks
do. Which rows form a shard follows from the plan alone (its N degrees and micro-batches), not from
the distributed code, so a run that all-reduced the statistics anyway (or not at all under a spatial
split) fails the check.
"""

from __future__ import annotations

from costmodel.parallel.axes import N
from costmodel.parallel.layout import interval
from costmodel.parallel.strategy import Strategy
from kernels import norm
from kernels.xp import module_of
from networks.ir import Network
from networks.ops.norm import synced

Rows = tuple[tuple[int, int], ...]


def sample_shards(net: Network, strategies: dict[str, Strategy], batch: int, micro_batches: int = 1) -> dict[str, Rows]:
    """Each unsynchronised batchnorm2d layer's sample shards, as rows ``[a, b)`` of the whole batch:
    for each micro-batch of ``batch / micro_batches`` samples, the block each N coordinate holds
    (costmodel.parallel.layout.interval); synchronised layers (the whole batch) are left out."""
    size = batch // micro_batches
    out = {}
    for layer in net.layers:
        if layer.op != "batchnorm2d" or synced(layer.p):
            continue
        n = strategies[layer.name].degree(N)
        rows = [(j * size + lo, j * size + hi) for j in range(micro_batches)
                for lo, hi in (interval(size, n, c) for c in range(n))]
        out[layer.name] = tuple((a, b) for a, b in rows if b > a)
    return out


def forward(x, gamma, beta, eps: float, rows: Rows | None):
    """(y, cache): the whole batch's statistics (``rows`` None), or each shard's own."""
    if rows is None:
        return norm.batchnorm2d_forward(x, gamma, beta, eps)
    parts = [norm.batchnorm2d_forward(x[a:b], gamma, beta, eps) for a, b in rows]
    return module_of(x).concatenate([y for y, _ in parts]), (rows, [c for _, c in parts])


def backward(dy, cache, rows: Rows | None):
    """(dx, dgamma, dbeta) of :func:`forward`: per shard, the weight gradients summed over shards."""
    if rows is None:
        return norm.batchnorm2d_backward(dy, cache)
    rows, caches = cache
    parts = [norm.batchnorm2d_backward(dy[a:b], c) for (a, b), c in zip(rows, caches)]
    dx = module_of(dy).concatenate([p[0] for p in parts])
    return dx, sum(p[1] for p in parts), sum(p[2] for p in parts)
