"""On machine `local`: the planner's plan checked in its step's context against the uniform plans.

The planner weighs every alternative on the profile's kernels, each timed alone: the context a
call meets in a step depends on its neighbours' choices, which only the finished plan fixes. Once
the plan is made, it and each uniform plan that fits (data, filter, spatial) are timed in their
step's context (executor.session.execute.step_context_entries, profiler.in_step.before_run) and predicted again,
and the fastest of them is the plan. Nothing has run yet: it is a second, finer weighing of a few
finished plans. A call two candidates make in the same context is timed once for both
(executor.probes.step_kernels.Shared), so that they differ by their differences, not by timing noise.
On lenet5 with 2 ranks (batch 64, the 2-core development VM, 2026-11-26) the solver's plan
(channel and filter splits in the fully connected layers) was priced 1.5% under data parallelism
from the profile alone; in context it was priced 3.9% over it in one validation and ran 8%
slower, 5.6% over in the next, where the two ran alike; weighed with their shared calls timed
once, the two were priced within a few percent and the solver's plan ran 1.2-6.7% slower in
three validations. With the executor's code around each collective priced as well (16 barriers
a step in the solver's plan, 6 in data parallelism; executor.probes.rank_terms), the weighing took the
data plan in six of six validations, measured fastest in five (docs/VALIDATION.md).

A candidate the executor cannot run (another precision or optimizer, recomputation) or whose
kernels cannot be timed here (machine not `local`, ``--profile``, a pipeline) has no step context
and keeps its profile-alone step; the planner's plan then stands.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from costmodel.compute.model import OnDemand
from costmodel.calls.algorithms import default_algorithms
from costmodel.step.prediction import StepPrediction, model_flops_utilization, predict_step
from costmodel.frameworks.uniform import uniform_strategies
from executor.report.summary import PLANNER
from networks.errors import DnnplanError
from planner.problem.baselines import fastest_algorithms
from planner.problem.solve import plan_from_prediction
from planner.plan.plan import Plan
from planner.plan.plan_file import write_plan
from profiler.context import Context
from lifecycle.scratch import scratch_folder

BASELINES = ("data", "filter", "spatial")


@dataclass(frozen=True)
class Timed:
    """A candidate plan weighed in its step's context: ``entries`` its kernel calls timed there
    (empty: no step context), ``step_s`` its step predicted from them (``prediction``: that
    prediction, as `dnnplan execute` makes it), ``alone_s`` from the profile alone."""

    name: str
    plan: Plan
    entries: dict
    step_s: float
    alone_s: float
    prediction: StepPrediction | None = None


def uniform_plan(ctx: Context, network_arg: str, machine_arg: str, strategies: dict, name: str,
                 fastest: bool = False) -> Plan:
    """A plan of the given strategies priced by the cost model, with its MFU: each convolution on
    the default algorithm, or (``fastest``) on its fastest, as the planner's baselines have them
    (planner.problem.baselines)."""
    algorithms = (fastest_algorithms(ctx.network, strategies, ctx.batch, ctx.machine, ctx.compute) if fastest
                  else default_algorithms(ctx.network))
    pred = predict_step(ctx.network, ctx.batch, strategies, algorithms, ctx.machine, ctx.compute)
    table = ctx.compute.table
    plan = plan_from_prediction(pred, ctx.network, network_arg, machine_arg,
                                None if table is None else table.short_id, solver={"name": name})
    mfu = model_flops_utilization(ctx.network, ctx.batch, pred.step_s, ctx.devices, ctx.machine)
    return replace(plan, mfu=mfu, memory_parts=pred.memory_parts)


def uniform_plans(ctx: Context, network_arg: str, machine_arg: str, fastest: bool = False) -> list[tuple[str, Plan]]:
    """Each uniform baseline (:data:`BASELINES`) that fits the network and the devices (``fastest``:
    on each convolution's fastest algorithm, as the planner's baselines)."""
    found = []
    for spec in BASELINES:
        try:
            strategies, _ = uniform_strategies(ctx.network, ctx.devices, ctx.batch, spec)
        except DnnplanError:
            continue
        found.append((spec, uniform_plan(ctx, network_arg, machine_arg, strategies, spec, fastest)))
    return found


def weighed(candidates: list[tuple[str, Plan]], threads: int | None = None,
            profile: str | None = None) -> list[Timed]:
    """Every candidate timed in its step's context and predicted from those times, before any run;
    a call two candidates make in the same context is timed once for both (:class:`Shared`)."""
    # the executor's run machinery weighs plans on machine `local` alone: `dnnplan plan` for any other
    # machine never loads it
    from executor.probes.step_kernels import Shared  # noqa: PLC0415 - deferred: machine `local` only
    from executor.session.execute import in_step_context, predict, prepare, step_context_entries  # noqa: PLC0415

    out, shared = [], Shared()
    with scratch_folder("context") as tmp:
        for i, (name, plan) in enumerate(candidates):
            path = os.path.join(tmp, f"plan{i}.yaml")
            write_plan(plan, path)
            try:
                prep = prepare(path, plan.devices, threads, profile)
            except DnnplanError:  # a plan the executor cannot run: no step context
                out.append(Timed(name, plan, {}, plan.step_s, plan.step_s))
                continue
            entries = step_context_entries(prep, shared)
            timed = in_step_context(prep, entries)
            pred = predict(timed)
            out.append(Timed(name, plan, entries, pred.step_s, timed.profile_step_s or pred.step_s, pred))
    return out


def fastest(timed: list[Timed]) -> Timed:
    """The planner's plan (the first), unless a candidate timed in context is predicted faster
    there; without step context for every candidate, the planner's plan."""
    if not timed or not all(t.entries for t in timed):
        return timed[0]
    return min(timed, key=lambda t: t.step_s)


def checked(plan: Plan, ctx: Context, network_arg: str, machine_arg: str) -> tuple[Plan, list[Timed]]:
    """`dnnplan plan` on machine `local`: the plan, or the uniform plan predicted faster in step
    context (its ``solver`` then says so), and every candidate as weighed (empty: no step context)."""
    if plan.pipeline is not None or not isinstance(ctx.compute, OnDemand):
        return plan, []
    candidates = [(PLANNER, plan)] + uniform_plans(ctx, network_arg, machine_arg, fastest=True)
    timed = weighed([(name, replace(each, choices=each.choices.but(seq=ctx.choices.seq)))  # read back with --seq
                     for name, each in candidates])
    if not timed[0].entries:
        return plan, []
    best = fastest(timed)
    if best.name == PLANNER:
        return plan, timed
    note = {**plan.solver, "step_context": f"the {best.name} plan, predicted faster in step context"}
    return replace(best.plan, baselines=plan.baselines, solver=note), timed
