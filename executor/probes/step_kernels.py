"""A plan's kernel calls timed in their step's context, in every context the step makes them in.

profiler.in_step.before_run (before a run) and profiler.in_step.kernels (inside one, ``--fresh-profile``) time
each kernel call after the calls just before it in the step. A call the step makes in several
places (ResNet-18's ReLU backward after a convolution's backward in one block and after a
gradient sum in the next, its residual addition in the forward pass and again summing gradients)
is timed in its median context (costmodel.compute.call_context.preceding_calls) and in each other one, and each
layer's pass is priced by the call timed where that pass makes it (costmodel.compute.call_context.occurrences;
costmodel.compute.profiled looks those entries up first). On ResNet-18 (64x64, batch 8, one rank)
the per-layer median |error| of one execute went from 15% to 11% (2026-11-26, the 2-core
development VM; docs/VALIDATION.md has the validation since).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.call_context import occurrences, preceding_calls, step_calls_by_layer, updates_of
from executor.runtime.stage import run_strategies
from networks.ir import Network
from planner.plan.plan import Plan


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
    median = preceding_calls(steps)
    extra, before, where = occurrences(tagged, median=median)
    extra = [c for c in extra if c.plain_key in wanted]
    return InStep(list(calls) + extra, {**median, **before}, updates_of(steps), where, wanted)


def by_layer(todo: InStep, timed: Mapping) -> dict:
    """The entries to install from ``timed`` (per key of ``todo.calls``): the asked calls' own and
    one per layer's occurrence of a call met in several contexts, not the extra calls' keys."""
    out = {k: e for k, e in timed.items() if k in todo.wanted}
    out.update({occ: timed[key] for occ, key in todo.where.items() if key in timed})
    return out


class Shared:
    """Calls timed in step context for several plans weighed against each other (executor.session.step_choice):
    a kernel call after the same calls, or a collective of the same size and group, is timed once
    and that timing prices it in every plan that makes it, so the plans' predicted steps differ
    by what differs between them, not by the noise of timing their common calls twice. On lenet5
    with two ranks (batch 64) the solver's plan and data parallelism share their convolutions; timed
    apart, conv2's backward was priced 1.75 ms in one and 1.98 ms in the other (before two runs a
    minute apart), and the faster of the two in step context changed from one weighing to the
    next (2026-11-26, the 2-core development VM). The optimiser's updates are timed per plan:
    they are timed as the plan's sequence (profiler.in_step.kernels), which differs between plans."""

    def __init__(self) -> None:
        self.kernels: dict[tuple, object] = {}
        self.collectives: dict[str, object] = {}

    def time_kernels(self, compute, todo: InStep) -> dict:
        """Per key of ``todo.calls``, its entry: from an earlier plan where timed after the same
        calls, else timed now (with the plan's updates, always timed now)."""
        updates = {c.key for c in todo.updates}
        sig = {c.key: context_signature(c, todo.before.get(c.key, ())) for c in todo.calls if c.key not in updates}
        known = {k: self.kernels[s] for k, s in sig.items() if s in self.kernels}
        timed = compute.time_in_step([c for c in todo.calls if c.key not in known], todo.before, todo.updates)
        self.kernels.update({sig[k]: e for k, e in timed.items() if k in sig})
        return {**timed, **known}

    def time_collectives(self, compute, calls, ranks: int) -> dict:
        """Per key of the collectives ``calls``, its entry: an earlier plan's, else timed now."""
        known = {c.key: self.collectives[c.key] for c in calls if c.key in self.collectives}
        timed = compute.time_collectives_in_step([c for c in calls if c.key not in known], ranks)
        self.collectives.update(timed)
        return {**timed, **known}


def context_signature(call: KernelCall, before) -> tuple:
    """What a call timed in step context is: the kernel and operands, and the calls replayed before it."""
    plain = lambda c: getattr(c, "plain_key", c.key)  # noqa: E731 - an InContext's own numbering is per plan
    return (plain(call), tuple(plain(c) for c in before))


def kernels_in_step(prep, calls: list, shared: Shared | None = None) -> dict:
    """Entries of ``calls`` (the kernel calls the prediction of ``prep``, an
    executor.session.execute.Prepared, looks up) timed now in their step's context (:func:`in_step`,
    :func:`by_layer`); with ``shared``, those an earlier plan timed in the same context are its."""
    todo = in_step(prep.net, prep.plan, calls)
    return by_layer(todo, (shared or Shared()).time_kernels(prep.compute, todo))


def collectives_in_step(prep, collectives, shared: Shared | None = None) -> dict:
    """Entries of the plan's ``collectives`` timed now on its ranks in their step's context
    (profiler.probes.comm_context); with ``shared``, those an earlier plan timed are its."""
    return (shared or Shared()).time_collectives(prep.compute, collectives, prep.plan.devices)
