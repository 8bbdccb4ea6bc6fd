"""One planning call's layer prices and collective times, each priced once (pure).

The pipeline search prices a block's layers on a new builder for every (pipeline degree,
micro-batch count) pair it bounds, again when it closes a pair's stage gaps, and the ZeRO choice
does so for every stage it plans (:class:`planner.problem.build.Builder`: one per ranks, micro-batch
and optimiser). Across them the same collective recurs (a tensor group's reduction of one layer's
output is the next layer's; a stage of ``d`` ranks at micro-batch ``b`` and one of ``2 d`` at ``2 b``
reduce the same bytes over the same node-wide group), and a builder made again prices the layers
its predecessor priced; a ZeRO stage changes a layer's weight collectives, update and memory,
never its shard, kernels, activations or other collectives. :class:`PricedLayers` keeps them for one
planning call on one machine and compute model, each under exactly the arguments it is a function
of: a collective's time (``costmodel.layer.comms.group_time``); in ``costmodel.layer.cost``'s memo,
a layer's shard and what it prices whatever the optimiser, and its weights' shards and what they
price whatever the batch (the micro-batch counts of one pipeline degree share them); each other
algorithm's passes, kept bytes and workspace on a shard (``planner.problem.build.derive_estimate``);
a layer's estimates under every argument ``Builder.estimates`` passes; its floor under any ZeRO
stage (``Builder.micro_floor``); and the reshards' edge matrices of one batch and ranks, which no
optimiser changes; so every number, and every plan, is the one priced afresh
(``tests/unit/planner/problem/test_priced_layers.py``).

Created per planning call (``planner.first_plan``), carried by its :class:`~planner.problem.solve.Settings`,
never module-wide: nothing outlives the call; a worker process starts with none kept
(:meth:`PricedLayers.__reduce__`). As :mod:`planner.problem.priced_once`, none is kept where the
compute model times kernels on demand (its answers change while the planner weighs).
"""

from __future__ import annotations

import uuid


class PricedLayers:
    """What one planning call has priced: ``collectives`` (``costmodel.layer.comms.group_time``'s
    memo), ``estimates`` (``planner.problem.build.Builder.estimates``' rows by their arguments),
    ``floors`` (``Builder.micro_floor``), ``matrices`` (``Builder.matrices``) and ``hidden``
    (``Builder.hidden_experts``), whatever the optimiser."""

    def __init__(self, token: str | None = None):
        #: names the planning call: a worker keeps one PricedLayers per token across its tasks
        #: (planner.pipeline.workers.pair_bounds.pair_bound); sent to a worker empty, token kept
        self.token = uuid.uuid4().hex if token is None else token
        self.collectives: dict[tuple, float] = {}
        self.estimates: dict[tuple, list] = {}
        #: each node's least per-micro-batch seconds under any ZeRO stage (``Builder.micro_floor``)
        self.floors: dict[tuple, float] = {}
        #: (batch, ranks, candidate limits) -> the edge matrices of the builders there (``Builder.matrices``)
        self.matrices: dict[tuple, dict] = {}
        #: a node's expert all-to-alls hidden under ``+experts`` (``Builder.hidden_experts``), by its arguments
        self.hidden: dict[tuple, float] = {}

    def __reduce__(self):
        return PricedLayers, (self.token,)
