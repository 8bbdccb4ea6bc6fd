"""The (pipeline degree, micro-batch count) pairs the pipeline search tries, and their order (pure).

Every pipeline degree ``S`` dividing the devices (at most one stage a block) and the micro-batch
counts ``m`` dividing the batch that make micro-batches of 1, 2, 4 or 8 samples, or as many for
each replica of node-wide tensor groups, or one micro-batch of the whole batch (or the counts the
caller names); each with a lower bound on its step, the larger of the physics floor and
:mod:`planner.pipeline_bound`'s (planner.pipeline_search, module docstring), by bound.
"""

from __future__ import annotations

from costmodel.candidates import divisors
from costmodel.machine import Machine
from networks.analysis import layer_cost
from networks.errors import DnnplanError
from networks.ir import Network
from planner.solvers import Budget
from planner.stack import Stack

#: micro-batch sizes tried unless the caller names micro-batch counts (with the whole batch: no
#: micro-batching); Megatron-LM's published runs use 1 to 8 (Narayanan et al. SC21, section 5)
MICRO_SIZES = (1, 2, 4, 8)
#: the share of the time left that bounding the pairs may take; the pairs left then keep their
#: physics floor as their bound (weaker, still a bound) and are tried last
BOUND_SHARE = 0.6


def pairs(stack: Stack, batch: int, p: int, machine: Machine, net: Network, stage_counts, micro_counts):
    """Every (bound, S, m) to try, by bound (module docstring)."""
    flops = sum(sum(layer_cost(layer, batch).flops) for layer in net.layers)
    peak = max(machine.device.peak_flops.values())
    out = []
    for stages in divisors(p):
        if stages > stack.n or (stage_counts and stages not in stage_counts):
            continue
        sizes = micro_sizes(p // stages, machine.devices_per_node)
        for m in divisors(batch):
            if micro_counts and m not in micro_counts:
                continue
            if not micro_counts and m > 1 and batch // m not in sizes:
                continue
            out.append((flops / (p * peak) * (stages + m - 1) / m, stages, m))
    if not out:
        raise DnnplanError(f"no pipeline degree and micro-batch count to try for {net.name} on {p} devices at "
                           f"batch {batch}", hint=f"--pipeline divides --devices and is at most {stack.n} "
                           "(its blocks); --micro-batches divides --batch")
    return sorted(out)


def micro_sizes(ranks: int, per_node: int) -> set[int]:
    """The micro-batch sizes (samples a micro-batch, over a stage's ``ranks``) tried: ``MICRO_SIZES``,
    and the same per data-parallel replica when the stage's tensor groups fill a node (Megatron-LM's
    layout: ``ranks / per_node`` replicas, each taking 1 to 8 samples)."""
    replicas = ranks // per_node if per_node > 1 and ranks % per_node == 0 else 1
    return {j * k for j in MICRO_SIZES for k in {1, replicas}}


def bounded(bound, combos: list[tuple[float, int, int]],
            budget: Budget | None = None) -> list[tuple[float, int, int, bool]]:
    """Each (S, m) with the larger of its two lower bounds (``bound(S, m)``: the stage bound and
    whether anything can fit) and whether anything can fit, by bound; once ``BOUND_SHARE`` of the
    budget's time left is spent, the pairs left keep their physics floor and come after the
    others (a floor is far below a stage bound: by it they would all come first)."""
    bounded_, floored = [], []
    left = None if budget is None else budget.left()
    stop = None if left is None else budget.clock() + BOUND_SHARE * left
    for phys, stages, m in combos:
        if stop is not None and (budget.clock() >= stop or budget.stop_requested):
            floored.append((phys, stages, m, True))
            continue
        step, fits = bound(stages, m)
        bounded_.append((max(phys, step), stages, m, fits))
    return sorted(bounded_) + sorted(floored)
