"""One ZeRO stage's plan: the whole batch at once, and the pipelines weighed beside it, before it or
instead of it (pure).

:func:`at_stage` plans every layer over all the devices (:func:`planner.problem.solve.make_plan`).
Where that fits and the network is a stack of identical blocks, the pipeline search runs too,
under that plan's step as its ceiling (:func:`_pipelined`); where the devices outnumber the
batch's samples and the memory limit binds the whole batch, the pipelines are weighed first and
the whole batch after, under their step (:func:`pipelines_first`); where nothing of the whole
batch fits, the pipeline search alone (:mod:`planner.pipeline.search`). :mod:`planner.first_plan`
calls it once a ZeRO stage and answers with the fastest (:mod:`planner.zero_choice`).
"""

from __future__ import annotations

import dataclasses

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from networks.errors import DnnplanError
from networks.ir import Network
from networks import durations
from planner.answer import ALL, ONE_STAGE, NONE, Answer, NoneFits, outcome
from planner.pipeline.search import NoPipelineFits, NotFaster, SearchOutOfTime, search_pipeline
from planner.pipeline.stack import uniform_stack
from planner.pipeline.triples import physics_floor
from planner.plan.plan import Plan
from planner.problem.solve import GIB, Binding, Infeasible, Settings, Slower, make_plan
from planner.solvers import partial
from planner.zero_choice import Beaten


def at_stage(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
             limit: float, settings: Settings, machine_ref: str, fingerprint: str | None, schedule: str,
             prove_s: float | None, ceiling: float | None = None, defer: bool = False,
             pipelines: bool = True) -> Answer:
    """The plan under ``settings``' ZeRO stage (module docstring); :class:`NoneFits` when none fits;
    ``ceiling``: a step held from another stage (pipelines that cannot beat it are not searched,
    :class:`Beaten` when none is left); ``defer``: where the whole batch fits, its pipelines are
    weighed after every ZeRO stage's plan (:func:`planner.first_plan._pipelines_after`), gradient accumulation only
    where its memory limit binds. Where the devices outnumber the batch's samples and the memory
    limit binds the whole batch, the pipelined plans are weighed first (:func:`pipelines_first`).
    ``pipelines`` False (``--pipeline off``): the whole batch at once alone, nothing else weighed."""
    if not pipelines:
        try:
            plan = make_plan(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref=machine_ref,
                             profile_fingerprint=fingerprint, suggest=False)
        except Infeasible as err:
            raise NoneFits(False) from err
        return Answer(settings, plan=plan)
    stack = uniform_stack(net) is not None and machine.device.kind != "cpu"
    # the whole batch's bounds are no bounds over the pipelined plans: passed on no higher than their floor
    whole = dataclasses.replace(settings, budget=partial(settings.budget, floor_s(net, batch, p, machine))) \
        if stack else settings
    few = stack and p > batch  # the devices outnumber the samples: a pipeline likely wins (pipelines_first)
    try:  # a transformer's whole batch under the step held: it ends once its bounds reach it
        plan = make_plan(net, network_ref, batch, p, machine, compute, limit, whole, machine_ref=machine_ref,
                         profile_fingerprint=fingerprint, suggest=False, unbound_only=few,
                         ceiling=ceiling if stack else None)
    except Binding:
        return pipelines_first(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref,
                               fingerprint, schedule, prove_s, ceiling)
    except Slower as err:  # its pipelines may still beat the step held
        return pipelines_first(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref,
                               fingerprint, schedule, prove_s, ceiling, whole_lower=err.lower_s)
    except Infeasible as err:
        if uniform_stack(net) is None:
            raise NoneFits(False) from err
        why = (f"no plan of the whole batch at once fits: the least any needs is {_gib(err.need_bytes)} GiB a "
               f"device, over the {_gib(limit)} GiB limit")
    else:
        return _pipelined(net, batch, p, machine, compute, limit, settings, plan, schedule, prove_s, ceiling, defer)
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit, settings, schedule=schedule, prove_s=prove_s,
                                 ceiling=ceiling)
    except NotFaster as err:
        raise Beaten(ceiling, err.lower_s) from None
    except NoPipelineFits:
        _out_of_time(settings)
        raise NoneFits(True) from None
    return Answer(settings, pipeline=choice, why=why)


def _out_of_time(settings: Settings) -> None:
    """:class:`SearchOutOfTime` (or Ctrl-C's ``KeyboardInterrupt``) when the time limit ended a search
    that found nothing; else nothing."""
    if settings.budget is not None and settings.budget.expired():
        settings.budget.check()
        raise SearchOutOfTime(f"no plan was found within the {settings.budget.stated_s:g} s time limit",
                              hint="raise --time-limit")


def floor_s(net: Network, batch: int, p: int, machine: Machine) -> float:
    """The least step any plan of ``net`` can take on ``p`` devices: its arithmetic at the highest
    peak it runs at (:func:`planner.pipeline.triples.physics_floor`, one stage, no bubble)."""
    return physics_floor(net, batch, p, machine)(1, 1, 1)


def pipelines_first(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
                    limit: float, settings: Settings, machine_ref: str, fingerprint: str | None, schedule: str,
                    prove_s: float | None, ceiling: float | None, whole_lower: float | None = None) -> Answer:
    """The answer where the devices outnumber the batch's samples and the memory limit binds the
    whole batch at once (its optimum without the limit does not fit). Its plans then split every
    sample (its sequence, heads or channels) over ``p / batch`` devices or more, in every layer,
    and a pipeline, whose stages split the layers instead, is likely faster; and its search under
    the binding limit is long (Qwen3-30B-A3B on 4,096 H100s: the 20 s default, for a plan twice a
    pipeline's step). So the pipeline search runs first (every stage count, gradient accumulation
    included, under ``ceiling``), then the whole batch under the fastest step held: its optimum
    without the memory limit, a bound on all its plans, ends it at once when no faster. The
    faster of the two is the answer, its gap counting the other's lower bound. ``whole_lower``: the
    whole batch was planned first, under ``ceiling``, and its bound ``whole_lower`` reached it
    (:class:`planner.problem.solve.Slower`): the pipelines alone are left to weigh."""
    budget = settings.budget
    floor = floor_s(net, batch, p, machine)
    choice, piped, fits, unsearched = None, float("inf"), True, None
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit,
                                 dataclasses.replace(settings, budget=partial(budget, floor if whole_lower is None
                                                                              else whole_lower)),
                                 schedule=schedule, prove_s=prove_s, ceiling=ceiling)
    except NotFaster as err:
        piped = err.lower_s
    except SearchOutOfTime as err:  # pairs left unsearched: none found, not proven none fits
        piped, unsearched = err.lower_s, err
    except NoPipelineFits:
        fits = False
    else:
        piped = choice.prediction.step_s * (1 - choice.stats.get("proven_gap", 1.0))
    steps = [x for x in (ceiling, choice.prediction.step_s if choice is not None else None) if x is not None]
    plan, whole = None, floor if whole_lower is None else whole_lower  # the floor until it is planned
    if whole_lower is None and (budget is None or not budget.expired()):
        try:
            plan = make_plan(net, network_ref, batch, p, machine, compute, limit,
                             dataclasses.replace(settings, budget=partial(budget, piped)), machine_ref=machine_ref,
                             profile_fingerprint=fingerprint, suggest=False, ceiling=min(steps, default=None))
        except Slower as err:
            whole = err.lower_s
        except Infeasible:
            whole = float("inf")
        except DnnplanError:  # the time limit came before a plan (and no baseline fits)
            if budget is None or not budget.expired():
                raise
        else:
            whole = outcome(Answer(settings, plan=plan)).lower_s
    if choice is not None and (plan is None or choice.prediction.step_s <= plan.step_s):
        step = choice.prediction.step_s
        gap = max(choice.stats.get("proven_gap", 0.0), 1 - whole / step if 0 < whole < step else 0.0)
        held = "" if plan is None else f" (its fastest found: {durations.seconds(plan.step_s, 4)} a step)"
        why = (f"no plan of the whole batch at once beats {durations.seconds(ceiling, 4)} a step (its bounds), the step held"
               if whole_lower is not None else
               f"the devices outnumber the batch's samples ({p} > {batch}): the pipelined plans weighed first, "
               f"then the whole batch at once under their step{held}")
        return Answer(settings, pipeline=dataclasses.replace(choice, stats={**choice.stats, "proven_gap": gap}),
                      why=why)
    if plan is not None:
        return _unbeaten(settings, plan, piped)
    _out_of_time(settings)
    if not steps and whole == float("inf") and unsearched is not None:
        raise unsearched
    if (not fits and whole == float("inf")) or not steps:
        raise NoneFits(True)
    raise Beaten(min(steps), min(piped, whole))


def _pipelined(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
               settings: Settings, plan: Plan, schedule: str, prove_s: float | None,
               ceiling: float | None = None, defer: bool = False) -> Answer:
    """The answer where the whole batch at once fits (module docstring): the pipeline search under
    ``plan``'s step as its ceiling (and ``ceiling``'s, a step held from elsewhere: a pair whose bound
    reaches it is not searched); its plan when faster, else ``plan`` with its gap counting the
    pipelined plans' least step (the pairs' bounds; their physics floor where the time limit left
    none to search), so an answer is called optimal only where no pipeline can beat it; ``defer``:
    accumulation only, where the memory limit binds (the rest after the ZeRO stages:
    :func:`planner.first_plan._pipelines_after`)."""
    cpu = machine.device.kind == "cpu"  # the executor's own machine: accumulation where memory binds
    binds = bool(plan.solver.get("memory_binding"))
    if uniform_stack(net) is None or (cpu and not binds):
        return Answer(settings, plan=plan)
    if defer and not binds:
        return Answer(settings, plan=plan, pipelines=NONE)
    held = plan.step_s if ceiling is None else min(plan.step_s, ceiling)
    budget = settings.budget
    if budget is not None and budget.expired():
        return _unbeaten(settings, plan, floor_s(net, batch, p, machine), defer)
    own = plan.step_s * (1 - (plan.solver.get("gap") or 0.0))  # the whole batch's lower bound
    cap = min(own, floor_s(net, batch, p, machine)) if defer else own  # defer: the other pipelines pending
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit,
                                 dataclasses.replace(settings, budget=partial(budget, cap)), schedule=schedule,
                                 stage_counts=(1,) if cpu or defer else None, prove_s=prove_s, ceiling=held)
    except (NotFaster, SearchOutOfTime) as err:
        return _unbeaten(settings, plan, err.lower_s, defer)
    except NoPipelineFits:
        return Answer(settings, plan=plan, pipelines=ONE_STAGE if defer else ALL)
    step = choice.prediction.step_s
    if step >= plan.step_s * (1 - 1e-9):
        return _unbeaten(settings, plan, step * (1 - choice.stats.get("proven_gap", 1.0)), defer)
    why = ("the whole batch at once fits only with the memory limit binding, and gradient accumulation is faster"
           if choice.stages == 1 and binds else
           f"the whole batch at once fits at {durations.seconds(plan.step_s, 4)} a step, and a pipeline is faster")
    return Answer(settings, pipeline=choice, why=why, pipelines=ONE_STAGE if defer else ALL)


def _unbeaten(settings: Settings, plan: Plan, lower_s: float, defer: bool = False) -> Answer:
    """``plan`` as the answer, its proven gap widened to what a pipelined plan could still take
    (``lower_s``, the least step of any pipelined plan)."""
    step = plan.step_s
    gap = 1 - lower_s / step if 0 < step and lower_s < step else 0.0
    if gap > (plan.solver.get("gap") or 0.0) and gap > 1e-12:
        # the gap is the pipelined plans': left at the time limit, or (the search ended before it)
        # those that could beat this plan by less than the proof tolerance (planner.pipeline.search)
        timed = settings.budget is not None and settings.budget.expired()
        plan = dataclasses.replace(plan, solver={**plan.solver, "gap": gap, "status": "feasible",
                                                 "gap_of": "time" if timed else "tolerance"})
    return Answer(settings, plan=plan, pipelines=ONE_STAGE if defer else ALL)


def _gib(nbytes: float) -> str:
    """Bytes in GiB to a tenth, or to three figures below 1 GiB (a limit of 0.01 GiB is not 0.0)."""
    gib = nbytes / GIB
    return f"{gib:.1f}" if gib >= 1 else f"{gib:.3g}"
