"""A plan on the first try: each ZeRO stage's plan, the fastest of them the answer (pure).

`dnnplan plan NETWORK` with no ``--pipeline`` plans every layer over all the devices and, for a
stack of identical blocks (a transformer), weighs the pipelines beside that plan, before it or
instead of it: one ZeRO stage's plan is :mod:`planner.stage_plan`'s (the answer is called optimal
only where every pipelined plan is proven no faster; a device count far above the batch is where
a pipeline wins: GPT-2 on 4,096 H100s, 8.8 ms a step with 4 stages against 11.5 ms without).
Without ``--zero`` this is done under each ZeRO stage that can win, and the fastest plan is the
answer (:mod:`planner.zero_choice`); the pipelines of a stage whose whole batch fit are weighed
after every stage has its plan, under the fastest step held (:func:`_pipelines_after`). On the
executor's own machine (a CPU: the executor runs pipelined plans without ZeRO, and machine `local`
checks the plan against the data-parallel plans in its step's context) only gradient accumulation
is weighed so, where the whole batch fits with its memory limit binding, and the stages are
tried without ZeRO, then with ZeRO-1, then ZeRO-3, only when nothing fits. Every plan returned fits
its limit as its peak is predicted (:mod:`planner.fit_check`). What it chose and why is in the
answer (:class:`planner.answer.Answer`). When nothing fits at all, the error names the flags and
numbers with which a plan exists, each checked (:mod:`planner.refusal`).
"""

from __future__ import annotations

import dataclasses

from costmodel.choices.optimizer import ZERO_STAGES
from costmodel.compute.model import ComputeModel
from costmodel.layer.candidates import divisors
from costmodel.machine.model import Machine
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError
from networks.ir import Network
from networks import durations
from planner.answer import ALL, NONE, Answer, NoneFits, answer_peak, outcome, step_of
from planner.fit_check import REFIT_SHARE, fitting
from planner.pipeline.search import (PROVE_S, SCHEDULE, NoPipelineFits, NotFaster, PipelineChoice, SearchOutOfTime,
                                     search_pipeline)
from planner.pipeline.stack import uniform_stack
from planner.pipeline.triples import AUTO, DEFAULT
from planner.problem.build import Builder, build_with
from planner.problem.priced_layers import PricedLayers
from planner.problem.priced_once import PricedOnce, priced_once
from planner.problem.solve import Settings
from planner.refusal import refusal
from planner.solvers import Budget
from planner.solvers.problem import memory_of
from planner.stage_plan import at_stage, floor_s
from planner.zero_choice import (ATTENTION_ORDER, ORDER, SHARDED_FIRST, Beaten, Share, Weighed, fastest_stage,
                                 overall_gap, uncovered)

GIB = 2.0 ** 30
#: the stages tried in order on the executor's own machine (a CPU), the next only when nothing fits
CPU_ZERO_TRIED = (0, 1, 3)


def first_plan(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
               limit: float | None, settings: Settings, *, machine_ref: str, fingerprint: str | None,
               zero_given: bool = True, schedule: str = SCHEDULE, prove_s: float | None = PROVE_S,
               batch_given: bool = True, zero_stages: tuple[tuple[int, ...], str] | None = None,
               pipelines: bool = True) -> Answer:
    """The plan (module docstring); ``limit``: bytes a device (None: the machine's memory);
    ``zero_given``: the user chose the ZeRO stage (else the fastest stage is the planner's choice,
    :mod:`planner.zero_choice`); ``batch_given``: the user chose the batch (else a refusal names it
    with a device count); ``zero_stages``: (the stages the planner may choose from, why the others
    are not weighed: said after its choice), None: every stage; ``pipelines`` False (``--pipeline
    off``): each stage's plan of the whole batch at once alone, no pipeline nor accumulation weighed."""
    limit = float(machine.device.mem_capacity_bytes if limit is None else limit)
    compute = priced_once(compute)  # each kernel priced once over the pairs and the ZeRO stages
    # and each layer and collective, where the kernels' times are fixed for the call (priced_once)
    settings = dataclasses.replace(settings, priced=PricedLayers() if isinstance(compute, PricedOnce) else None)

    stages: dict[int, Answer] = {}  # each ZeRO stage's answer, when the planner chooses the stage

    def plan_at(trial: Settings, ceiling: float | None = None) -> Answer:
        answer, note = fitting(lambda under: at_stage(net, network_ref, batch, p, machine, compute, under, trial,
                                                      machine_ref, fingerprint, schedule, prove_s, ceiling,
                                                      defer=stages is not None, pipelines=pipelines),
                               answer_peak, limit,
                               lambda over, under: _refit(over, net, batch, p, machine, compute, under, trial, schedule),
                               passes=(Beaten,), beaten=None if ceiling is None else lambda over: _slower(
                                   over, ceiling, floor_s(net, batch, p, machine) if pipelines and uniform_stack(net) else 0.0))
        answer = dataclasses.replace(answer, memory_note=note) if note else answer
        if stages is not None:
            stages[trial.choices.zero] = answer
        return answer

    def pipelines_at(trial: Settings, ceiling: float, counts: tuple[int, ...] | None) -> tuple[Answer, str]:
        """Stage ``trial``'s pipelined plans of ``counts`` stages (None: every count) that beat ``ceiling``."""
        return fitting(lambda under: Answer(trial, pipeline=search_pipeline(
            net, batch, p, machine, compute, under, trial, stage_counts=counts, schedule=schedule, prove_s=prove_s,
            ceiling=ceiling)), answer_peak, limit,
            lambda over, under: _refit(over, net, batch, p, machine, compute, under, trial, schedule),
            passes=(NotFaster,))

    try:
        if zero_given or settings.choices.zero or p == 1:  # one device: no replica to shard over
            stages = None
            return plan_at(settings)
        if machine.device.kind == "cpu":
            stages = None
            return _when_nothing_fits(plan_at, settings)
        order = ORDER
        if any(layer.op == "attention" for layer in net.layers):
            binds = _memory_binds(net, batch, p, machine, compute, limit, settings.with_zero(1))
            order = SHARDED_FIRST if binds else ATTENTION_ORDER
        if zero_stages is not None:
            order = tuple(z for z in order if z in zero_stages[0])
        stack = uniform_stack(net) if pipelines else None
        floor = floor_s(net, batch, p, machine) if stack is not None else 0.0
        answer, zero, weighed = fastest_stage(settings, plan_at, lambda a: outcome(a, floor), _wrap, order)
        answer, zero, weighed = _pipelines_after(settings, pipelines_at, stages, answer, zero, weighed, floor,
                                                 stack.n if stack is not None else 0, p)
    except NoneFits as err:
        most = settings if zero_given or settings.choices.zero else settings.with_zero(max(ZERO_STAGES))
        raise refusal(net, batch, p, machine, compute, limit, most, err.pipelined, batch_given, pipelines) from None
    chosen = _chosen(answer, zero, weighed)
    return chosen if zero_stages is None else dataclasses.replace(chosen, zero_why=f"{chosen.zero_why}; {zero_stages[1]}")


def _slower(answer: Answer, ceiling: float, floor: float) -> Beaten | None:
    """A stage's over-limit answer no faster than ``ceiling``, the step held from another stage, is
    not planned again under a lower limit (its plans there are no faster: GPT-3 175B on 64 H100s,
    ZeRO-1's 58.8 s pipeline under ZeRO-3's 58.18 s peaked over the limit, and planning it again took
    5 s of the 20 s default, which left ZeRO-0 unplanned): the stage is beaten, its lower bound the
    over-limit search's (no less under the lower limit; ``floor``: the least step of the pipelined
    plans the answer has not weighed yet, as :func:`planner.answer.outcome` takes it)."""
    step = step_of(answer)
    if step < ceiling:
        return None
    lower = outcome(answer, floor).lower_s
    return Beaten(ceiling, lower, f"has no plan faster than {durations.seconds(ceiling, 4)} (its fastest, "
                                  f"{durations.seconds(step, 4)}, peaked over the limit and was not planned again)")


def _refit(answer: Answer, net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, under: float,
           settings: Settings, schedule: str) -> Answer:
    """``answer``'s own pipeline degree, micro-batch count and schedule planned under ``under``
    (:func:`refit_choice`). A plan over all the devices has no layout to keep, so the time-out stands."""
    if answer.pipeline is None:
        raise _again_out_of_time(under)
    return Answer(settings, pipeline=refit_choice(answer.pipeline, net, batch, p, machine, compute, under, settings,
                                                  schedule), why=answer.why)


def refit_choice(c: PipelineChoice, net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
                 under: float, settings: Settings, schedule: str) -> PipelineChoice:
    """The pipeline choice ``c``'s own degree, micro-batch count and schedule planned under ``under``,
    within :data:`planner.fit_check.REFIT_SHARE` of the stated time limit (planning again ran out of
    time: :mod:`planner.fit_check`; ``dnnplan plan`` with or without ``--pipeline``); its proven gap
    is over every layout, from the first search's lower bound (a plan under the lower limit fits the
    higher one)."""
    budget = settings.budget
    if budget is None:
        raise _again_out_of_time(under)
    grace = budget.renewed(REFIT_SHARE * budget.stated_s if budget.stated_s is not None else None)
    kept = INTERLEAVED if c.chunks > 1 else schedule if schedule not in (AUTO, DEFAULT) else SCHEDULE
    # its stages relaxed, their gap stated: closing them exactly can take the whole grace, each refit
    # (Llama 3 70B on 16 A100s: two refits' closings took the answer to 22.7 s of the 20 s bound)
    choice = search_pipeline(net, batch, p, machine, compute, under, dataclasses.replace(settings, budget=grace),
                             stage_counts=(c.stages,), micro_counts=(c.micro_batches,), schedule=kept, prove_s=0.0,
                             close_choice=False)
    # its gap over every layout: the first search's lower bound holds under the lower limit too
    lower = c.prediction.step_s * (1 - c.stats.get("proven_gap", 1.0))
    step = choice.prediction.step_s
    gap = max(choice.stats.get("proven_gap", 0.0), 1 - lower / step if step > 0 else 0.0)
    return dataclasses.replace(choice, stats={**choice.stats, "proven_gap": gap})


def _again_out_of_time(under: float) -> SearchOutOfTime:
    return SearchOutOfTime(f"no plan was found again under {under / GIB:.3f} GiB a device within the time limit",
                           hint="raise --time-limit")


def _when_nothing_fits(plan_at, settings: Settings) -> Answer:
    """The executor's own machine (a CPU): the plan without ZeRO, else with ZeRO-1, then ZeRO-3,
    when nothing fits without (module docstring)."""
    for zero in CPU_ZERO_TRIED:
        trial = settings.with_zero(zero)
        try:
            answer = plan_at(trial)
        except NoneFits:
            if zero == CPU_ZERO_TRIED[-1]:
                raise
            continue
        more = f"nothing fits without ZeRO, so the optimiser state is sharded (ZeRO-{zero})" if zero else ""
        return dataclasses.replace(answer, zero_why=more)
    raise AssertionError("unreachable")


def _wrap(result, budget: Budget, settings: Settings, covered: str = "") -> Answer:
    """What a stage's search offered (a plan or a pipeline choice) as an answer under its settings,
    with the gap ``budget`` proves over the stages planned so far (``covered`` names them:
    Ctrl-C's answer)."""
    gap = budget.best.gap if budget.best is not None else None
    if isinstance(result, PipelineChoice):
        stats = result.stats if gap is None else {**result.stats, "proven_gap": max(gap, result.stats["proven_gap"])}
        return Answer(settings, pipeline=dataclasses.replace(result, stats=stats), zero_why=covered)
    if gap is not None:
        result = dataclasses.replace(result, solver={**result.solver, "gap": max(gap, result.solver.get("gap") or 0)})
    return Answer(settings, plan=result, zero_why=covered)


def _chosen(answer: Answer, zero: int, weighed: list[Weighed]) -> Answer:
    """The fastest stage's answer, its gap counting every stage and why its ZeRO stage was chosen."""
    step = step_of(answer)
    gap = overall_gap(step, weighed)
    left_out = uncovered(weighed)  # stages the gap does not cover: stated, and the answer not called optimal
    more = {"uncovered_zero": left_out} if left_out else {}
    if answer.pipeline is not None:
        stats = answer.pipeline.stats
        if gap > stats.get("proven_gap", 0.0) or more:
            answer = dataclasses.replace(answer, pipeline=dataclasses.replace(
                answer.pipeline, stats={**stats, "proven_gap": max(gap, stats.get("proven_gap", 0.0)), **more}))
    elif (gap > (answer.plan.solver.get("gap") or 0.0) * (1 + 1e-12) and gap > 1e-12) or more:
        answer = dataclasses.replace(answer, plan=dataclasses.replace(
            answer.plan, solver={**answer.plan.solver, "gap": max(gap, answer.plan.solver.get("gap") or 0.0),
                                 "status": "feasible", **more}))
    each = "; ".join(f"ZeRO-{w.zero} {durations.seconds(w.step_s, 4)} a step" if w.step_s is not None else
                     f"ZeRO-{w.zero} {w.skipped}" for w in weighed)
    return dataclasses.replace(answer, weighed=tuple(weighed),
                               zero_why=f"ZeRO-{zero} is the fastest of the ZeRO stages weighed ({each})")


def _pipelines_after(settings: Settings, pipelines_at, stages: dict[int, Answer], answer: Answer, zero: int,
                     weighed: list[Weighed], floor: float, blocks: int, p: int) -> tuple[Answer, int, list[Weighed]]:
    """The pipelined plans of the ZeRO stages whose answers have not weighed them (the whole batch
    fit), each under the fastest step held as its ceiling, fastest stage first (a pair whose bound
    reaches the step held is not searched, so once the stages have their plans most are not):
    ``(answer, zero, weighed)`` with a faster pipeline as the answer, and each stage's lower bound
    counting its pipelined plans (their bounds, or ``floor`` where the time limit left them
    unsearched; a stage skipped by dominance follows the stage it follows).
    ``pipelines_at(settings, ceiling, counts)``: a stage's pipelined plans of ``counts`` stages."""
    by = {w.zero: w for w in weighed}
    parent = settings.budget
    step = step_of  # an answer's step, whole batch or pipelined
    for got in sorted((a for a in stages.values() if a.pipelines != ALL), key=step):
        z = got.settings.choices.zero
        counts = None if got.pipelines == NONE else tuple(s for s in divisors(p) if 1 < s <= blocks)
        own = outcome(dataclasses.replace(got, pipelines=ALL)).lower_s  # the whole batch's (or accumulation's)
        lower = float("inf") if counts == () else floor
        if counts != () and not (parent is not None and parent.expired()):
            held = step(answer)
            share = None if parent is None else Share(
                parent, parent.left(), lambda result, budget, s=got.settings: _wrap(result, budget, s),
                lambda x: min([x] + [w.lower_s for w in by.values()]), f"ZeRO-{z}")
            trial = dataclasses.replace(got.settings, budget=share)
            try:
                found, note = pipelines_at(trial, held, counts)
            except (NotFaster, SearchOutOfTime) as err:
                lower = err.lower_s
            except NoPipelineFits:
                lower = float("inf")
            except DnnplanError:  # a faster pipeline whose peak fits no lowered limit: not proven slower
                pass
            else:
                got_step = step(found)
                lower = got_step * (1 - found.pipeline.stats.get("proven_gap", 1.0))
                if got_step < held * (1 - 1e-9):
                    what = "the whole batch at once fits" if got.pipeline is None else "gradient accumulation runs"
                    why = f"{what} at {durations.seconds(step(got), 4)} a step, and a pipeline is faster"
                    answer, zero = dataclasses.replace(found, memory_note=note, why=why), z
                    by[z] = dataclasses.replace(by[z], step_s=min(by[z].step_s, got_step))
        before = by[z].lower_s
        by[z] = dataclasses.replace(by[z], lower_s=min(own, lower))
        for x in (2, 3):  # ZeRO-2 and ZeRO-3 skipped on this stage's plan (planner.zero_choice._skip)
            w, source = by.get(x), 1 if x == 2 or by.get(2) is None or by[2].step_s is None else 2
            if w is not None and source == z and w.step_s is None and w.skipped.startswith("not planned (its step") \
                    and w.lower_s == before:
                by[x] = dataclasses.replace(w, lower_s=by[z].lower_s)
    return answer, zero, [by[z] for z in sorted(by)]


def _memory_binds(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                  settings: Settings) -> bool:
    """The cheap bound that orders the ZeRO stages (:data:`planner.zero_choice.SHARDED_FIRST`):
    whether the whole batch's layers, each under its fastest candidate alone (no edges), hold more
    than ``limit`` under ``settings``' stage (ZeRO-1): its optimum is then likely held back by
    memory, where ZeRO-3 can win. Its nodes are the ones the stage's own plan prices first."""
    builder = Builder(batch, p, machine, compute, settings.choices.sharded_optimizer,
                      recompute=settings.choices.may_recompute, overlap=settings.overlap, priced=settings.priced)
    problem = build_with(builder, net, limit, edges=False).problem
    return memory_of(problem, [int(c.argmin()) for c in problem.node_cost]) > limit
