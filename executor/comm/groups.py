"""The communicators of a plan's groups: the ranks that differ from this one only along some
split dimensions of a layer's strategy (``Strategy.group``), one per distinct partition."""

from __future__ import annotations

from costmodel.parallel.strategy import Strategy
from executor.backend.device import Communicator


class GroupComms:
    """Sub-communicators of ``comm``, one per distinct partition of the ranks into groups.

    ``get(strategy, dims)`` returns the communicator of the ranks that differ from this rank only
    along ``dims`` (``Strategy.group``), or None when that group is this rank alone. Creating one
    is collective over ``comm``: every rank must call ``get`` with the same arguments in the same
    order (the runtime does so once, at setup, layer by layer). Partitions are cached, so two
    layers with equal groups share a communicator.
    """

    def __init__(self, comm: Communicator):
        self.comm = comm
        self.rank = comm.rank
        self._cache: dict[tuple, Communicator] = {}

    def get(self, strategy: Strategy, dims) -> Communicator | None:
        dims = tuple(d for d in dims if strategy.degree(d) > 1)
        if not dims:
            return None
        partition = tuple(sorted({strategy.group(r, dims) for r in range(strategy.p)}))
        if partition not in self._cache:
            mine = strategy.group(self.rank, dims)
            self._cache[partition] = self.comm.split(partition.index(mine), self.rank)
        return self._cache[partition]

    def free(self) -> None:
        for sub in self._cache.values():
            sub.free()
        self._cache.clear()
