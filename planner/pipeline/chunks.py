"""A device solve under interleaved 1F1B, its memory counted chunk by chunk (pure).

Under Megatron's interleaved order a device's chunks do not hold the same micro-batches at once
(``costmodel.memory.pipeline``): at each moment chunk ``c`` has ``n_c`` in flight, and the device
holds ``sum_c n_c a_c`` bytes of activations, ``a_c`` the sum over chunk ``c``'s layers of what each
keeps for one micro-batch under its strategy. The plan fits when the most of that over the moments
(``ChunkHold.held``, what ``dnnplan predict`` counts) plus every layer's persistent memory and the
largest transient fits the limit: one linear constraint a moment. The stage solvers hold one linear
memory count, so a device is solved with one count vector ``v`` (each layer's activations counted
``v`` of its chunk times), and:

* any moment's vector, or any mix of moments' vectors (weights summing to one), makes a *relaxation*:
  each plan that fits every moment fits it, so its optimum is a lower bound on the device's, and its
  optimum is the device's when it fits every moment;
* the solve starts from the moment the unconstrained optimum holds the most at, and when its answer
  holds the most at another moment, solves that moment next, until one seen before comes back (a
  cycle) or :data:`TRIES` solves are made; the first answer whose busiest moment fits is returned,
  its proven gap against the best of the relaxations' bounds;
* else counts between the mean of the moments tried and each chunk's most over the order
  (``ChunkHold.most``), :data:`TOWARD_MOST` of the way: neither a relaxation nor a restriction, so
  an answer is taken only where its busiest moment fits, its gap against the relaxations' bound
  (gpt3-175b on 512 H100s: devices whose relaxations' answers hold 0.2-9% over the limit at
  another moment, and whose restriction fits nothing, fit at 5% of the way, within 1-4% of the
  relaxations' bound; the mean of the two moments that cycled, itself a relaxation, fit none of
  them);
* else the *restriction*: each chunk counted at its most (a plan fitting it fits every moment), its
  gap against the relaxations' bound;
* else :class:`Unresolved`: some moment's relaxation fits, so the device may have a plan the solves
  did not find; nothing is proven to fit nothing (the search keeps the triple at its bound).

The solution's ``held_bytes`` is its busiest moment's count, the same as predict's for the plan.
"""

from __future__ import annotations

import dataclasses

from costmodel.memory.pipeline import ChunkHold

#: relaxations solved at most before the restriction (each one device solve under the limit)
TRIES = 3
#: how far from the mean of the moments tried toward each chunk's most the counts solved after the
#: relaxations go, in turn, before the restriction (each one device solve; module docstring)
TOWARD_MOST = (0.05, 0.2)


class Unresolved(Exception):
    """A device solve that found no plan fitting every moment of its order, though a relaxation
    fits (module docstring): no answer, and no proof that none fits; ``lower_s``: the relaxations'
    bound on the device's objective."""

    def __init__(self, key: object, lower_s: float):
        super().__init__(f"device {key}: no plan found that fits every moment of its order")
        self.lower_s = lower_s


def solve_held(solver, key: object, net, hold: ChunkHold, extra: dict | None = None):
    """``solver``'s (a ``planner.pipeline.stage_solver.StageSolver``) best solution of device ``net`` under
    ``hold``'s moments (module docstring), or None when a relaxation fits nothing (no plan fits);
    raises :class:`Unresolved` when the solves find no plan but cannot prove none fits."""
    limit, weight = solver.limit * (1 + 1e-9), solver.weight
    tried: list[tuple[float, ...]] = []
    lower = 0.0
    v = hold.worst(solver.free(key, net, extra).layer_activation_bytes)
    for _ in range(TRIES):
        sol = solver.bound(key, net, hold.per_layer(v), extra)
        if sol is None:
            return None  # a relaxation fits nothing: no plan fits
        lower = max(lower, sol.lower_s(weight))
        if sol.held_bytes(hold) <= limit:
            return _proven(solver, sol, lower)
        tried.append(tuple(float(x) for x in v))
        v = tuple(float(x) for x in hold.worst(sol.layer_activation_bytes))
        if v in tried:
            break
    mean, most = tuple(sum(col) / len(tried) for col in zip(*tried)), hold.most()
    for share in TOWARD_MOST:
        sol = solver.bound(key, net, hold.per_layer(tuple(a + share * (b - a) for a, b in zip(mean, most))), extra)
        if sol is not None and sol.held_bytes(hold) <= limit:
            return _proven(solver, sol, lower)
    sol = solver.bound(key, net, hold.per_layer(most), extra)
    if sol is None:
        raise Unresolved(key, lower)
    return _proven(solver, sol, lower)


def _proven(solver, sol, lower: float):
    """``sol`` with its gap against ``lower``, the best relaxation bound (a relaxation's answer:
    no more than its own gap), counted in ``solver.worst_gap``."""
    objective = solver.weight * sol.micro_s + sol.once_s + sol.tied_s
    gap = max(0.0, 1 - lower / objective) if objective > 0 else 0.0
    solver.worst_gap = max(solver.worst_gap, gap)
    return dataclasses.replace(sol, gap=gap)
