"""A plan on the first try: without pipelining when one fits, else the pipeline search (pure).

`dnnplan plan NETWORK` with no ``--pipeline`` plans every layer over all the devices. When such a
plan fits only with the memory limit binding (the unconstrained optimum does not fit) and the
network is a stack of identical blocks, gradient accumulation is weighed too (the pipeline search on
one stage: micro-batches of 1 to 8 samples, activations kept for one), and the faster plan is the
answer. When no such plan fits the memory limit and the network is a stack of identical blocks (a transformer), the
pipeline search runs instead (stages, micro-batches and, inside each stage, the per-layer splits
and recomputation: :mod:`planner.pipeline_search`); when nothing fits there either and no ZeRO
stage was asked for, it runs again with the optimiser state sharded (ZeRO-1, then ZeRO-3). What it
chose and why is in the answer. When nothing fits at all, the error names the flags and numbers
with which a plan exists, each checked (:mod:`planner.refusal`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.compute import ComputeModel
from costmodel.machine import Machine
from networks.ir import Network
from planner.optimize import Infeasible, Settings, make_plan
from planner.pipeline_search import (PROVE_S, SCHEDULE, NoPipelineFits, PipelineChoice, SearchOutOfTime,
                                     search_pipeline)
from planner.plan import Plan
from planner.refusal import refusal
from planner.stack import uniform_stack

GIB = 2.0 ** 30
#: the ZeRO stages tried, in order, when nothing fits and none was asked for
ZERO_TRIED = (1, 3)


@dataclass(frozen=True)
class Answer:
    """A plan over all the devices, or a pipelined one with why the pipeline search ran, and the
    settings it was found under (its ZeRO stage may be the search's choice)."""

    settings: Settings
    plan: Plan | None = None
    pipeline: PipelineChoice | None = None
    why: str = ""
    timed: tuple = ()  # machine `local`: the candidates weighed in step context (executor.step_choice)


def first_plan(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
               limit: float | None, settings: Settings, *, machine_ref: str, fingerprint: str | None,
               zero_given: bool = True, schedule: str = SCHEDULE, prove_s: float | None = PROVE_S,
               batch_given: bool = True) -> Answer:
    """The plan (module docstring); ``limit``: bytes a device (None: the machine's memory);
    ``zero_given``: the user chose the ZeRO stage (the search does not change it); ``batch_given``:
    the user chose the batch (else a refusal names it with a device count)."""
    limit = float(machine.device.mem_capacity_bytes if limit is None else limit)
    try:
        plan = make_plan(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref=machine_ref,
                         profile_fingerprint=fingerprint, suggest=False)
        return _accumulated(net, batch, p, machine, compute, limit, settings, plan, schedule, prove_s) \
            or Answer(settings, plan=plan)
    except Infeasible as err:
        if uniform_stack(net) is None:
            raise refusal(net, batch, p, machine, compute, limit, settings, False, batch_given) from err
        why = (f"no plan of the whole batch at once fits: the least any needs is {err.need_bytes / GIB:.1f} GiB a "
               f"device, over the {limit / GIB:.1f} GiB limit")
    for zero in (settings.zero,) + (() if zero_given or settings.zero else ZERO_TRIED):
        trial = dataclasses.replace(settings, zero=zero)
        try:
            choice = search_pipeline(net, batch, p, machine, compute, limit, trial, schedule=schedule,
                                     prove_s=prove_s)
        except NoPipelineFits:
            if settings.budget is not None and settings.budget.expired():
                settings.budget.check()
                raise SearchOutOfTime(f"no plan was found within the {settings.budget.stated_s:g} s time limit",
                                      hint="raise --time-limit") from None
            continue
        more = f"; no pipelined plan fits without ZeRO either, so the optimiser state is sharded (ZeRO-{zero})" \
            if zero != settings.zero else ""
        return Answer(trial, pipeline=choice, why=why + more)
    raise refusal(net, batch, p, machine, compute, limit, settings, True, batch_given)


def _accumulated(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                 settings: Settings, plan: Plan, schedule: str, prove_s: float | None) -> Answer | None:
    """Gradient accumulation where the whole batch at once fits only with its memory limit binding
    (module docstring): its answer when faster than ``plan``, else None."""
    budget = settings.budget
    if "memory limit binding" not in str(plan.solver.get("detail", "")) or uniform_stack(net) is None \
            or (budget is not None and budget.expired()):
        return None
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit, settings, stage_counts=(1,),
                                 schedule=schedule, prove_s=prove_s)
    except (NoPipelineFits, SearchOutOfTime):
        return None
    if choice.prediction.step_s >= plan.step_s * (1 - 1e-9):
        return None
    return Answer(settings, pipeline=choice, why="the whole batch at once fits only with the memory limit binding, "
                  "and gradient accumulation is faster")
