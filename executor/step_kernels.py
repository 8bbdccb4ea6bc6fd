"""A plan's kernel calls timed in their step's context, in every context the step makes them in.

profiler.step_context (before a run) and profiler.inrun (inside one, ``--fresh-profile``) time
each kernel call after the calls just before it in the step. A call the step makes in several
places (ResNet-18's ReLU backward after a convolution's backward in one block and after a
gradient sum in the next, its residual addition in the forward pass and again summing gradients)
is timed in its median context (costmodel.reuse.preceding_calls) and in each other one, and each
layer's pass is priced by the call timed where that pass makes it (costmodel.reuse.occurrences;
costmodel.profiled_compute looks those entries up first). On ResNet-18 (64x64, batch 8, one rank)
the per-layer median |error| of one execute went from 15% to 11% (2026-11-26, the 2-core
development VM; docs/VALIDATION.md has the validation since).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from costmodel.kernel_calls import KernelCall
from costmodel.reuse import occurrences, preceding_calls, step_calls_by_layer, updates_of
from executor.runtime import run_strategies
from networks.ir import Network
from planner.plan import Plan


@dataclass(frozen=True)
class InStep:
    """What to time for a plan's kernel calls in their step's context: ``calls`` (those asked for,
    then one per other context a call meets), ``before`` (per key, the calls to replay before it),
    ``updates`` (the step's optimiser updates in order) and ``where`` (per layer's occurrence key,
    the key of the call timed there)."""

    calls: list
    before: dict
    updates: list
    where: dict
    wanted: frozenset


def in_step(net: Network, plan: Plan, calls: list[KernelCall]) -> InStep:
    """The timing of ``calls`` (the kernel calls a prediction of ``plan`` looks up) in its step."""
    tagged = step_calls_by_layer(net, plan.batch, run_strategies(plan), plan.algorithms())
    steps = [c for _, c in tagged]
    wanted = frozenset(c.key for c in calls)
    extra, before, where = occurrences(tagged)
    extra = [c for c in extra if c.plain_key in wanted]
    return InStep(list(calls) + extra, {**preceding_calls(steps), **before}, updates_of(steps), where, wanted)


def by_layer(todo: InStep, timed: Mapping) -> dict:
    """The entries to install from ``timed`` (per key of ``todo.calls``): the asked calls' own and
    one per layer's occurrence of a call met in several contexts, not the extra calls' keys."""
    out = {k: e for k, e in timed.items() if k in todo.wanted}
    out.update({occ: timed[key] for occ, key in todo.where.items() if key in timed})
    return out


def kernels_in_step(prep, calls: list) -> dict:
    """Entries of ``calls`` (the kernel calls the prediction of ``prep``, an
    executor.session.Prepared, looks up) timed now in their step's context (:func:`in_step`,
    :func:`by_layer`)."""
    todo = in_step(prep.net, prep.plan, calls)
    return by_layer(todo, prep.compute.time_in_step(todo.calls, todo.before, todo.updates))
