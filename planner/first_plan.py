"""A plan on the first try: without pipelining when one fits, else the pipeline search (pure).

`dnnplan plan NETWORK` with no ``--pipeline`` plans every layer over all the devices. When such a
plan fits and the network is a stack of identical blocks, the pipeline search runs too, under that
plan's step as its ceiling (a pipeline and micro-batch pair whose lower bound reaches it is not
searched, so most are not): a pipeline, or gradient accumulation on one stage, is the answer when
faster, and the answer is called optimal only where every pipelined plan is proven no faster (the
gap stated counts the pipelined plans' least step; a device count far above the batch is where a
pipeline wins: GPT-2 on 4,096 H100s, 8.8 ms a step with 4 stages against 11.5 ms without; where
the memory limit binds the whole batch there too, the pipelines are weighed first and the whole
batch after, under their step: :func:`_pipelines_first`). On the
executor's own machine (a CPU) only gradient accumulation is weighed so, and only where the whole
batch fits with its memory limit binding (its plans are checked in their step's context, below).
When no such plan fits the memory limit and the network is a stack of identical blocks (a
transformer), the pipeline search runs instead (stages, micro-batches and, inside each stage, the
per-layer splits and recomputation: :mod:`planner.pipeline.search`). Without ``--zero`` this is
done under each ZeRO stage that can win and the fastest plan is the answer
(:mod:`planner.zero_choice`); on the executor's own machine (a CPU: the executor runs pipelined
plans without ZeRO, and machine `local` checks the plan against the data-parallel plans in its
step's context) without ZeRO, then with ZeRO-1, then ZeRO-3, only when nothing fits. What it chose and why is in the answer. When nothing fits at all,
the error names the flags and numbers with which a plan exists, each checked
(:mod:`planner.refusal`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from networks.ir import Network
from costmodel.choices.optimizer import ZERO_STAGES
from networks.errors import DnnplanError
from planner.problem.build import Builder, build_with
from planner.problem.priced_layers import PricedLayers
from planner.problem.priced_once import PricedOnce, priced_once
from planner.problem.solve import Binding, Infeasible, Settings, Slower, make_plan
from planner.pipeline.search import (PROVE_S, SCHEDULE, NoPipelineFits, NotFaster, PipelineChoice, SearchOutOfTime,
                                     search_pipeline)
from costmodel.step.pipeline import INTERLEAVED
from planner.fit_check import REFIT_SHARE, fitting
from planner.pipeline.triples import AUTO, DEFAULT, physics_floor
from planner.plan.plan import Plan
from planner.refusal import refusal
from planner.solvers import Budget, partial
from planner.solvers.problem import memory_of
from planner.pipeline.stack import uniform_stack
from planner.pipeline.pair_bounds import bound_tasks, pair_bound, pair_keys
from planner.problem.parallel import side_by_side
from costmodel.layer.candidates import divisors
from planner.zero_choice import (ATTENTION_ORDER, ORDER, SHARDED_FIRST, Beaten, Share, Weighed, fastest_stage,
                                 overall_gap, uncovered)

GIB = 2.0 ** 30
#: what a stage's answer weighed of the pipelined plans (:attr:`Answer.pipelines`)
ALL, ONE_STAGE, NONE = "all", "one stage", "none"
#: the stages tried in order on the executor's own machine (a CPU), the next only when nothing fits
CPU_ZERO_TRIED = (0, 1, 3)


class _NoneFits(DnnplanError):
    """No plan fits under one ZeRO stage (``pipelined``: the pipeline search found none either)."""

    def __init__(self, pipelined: bool):
        super().__init__("no plan fits")
        self.pipelined = pipelined


@dataclass(frozen=True)
class Answer:
    """A plan over all the devices, or a pipelined one with why the pipeline search ran, and the
    settings it was found under (its ZeRO stage may be the planner's choice: ``zero_why`` says
    why, ``weighed`` what each stage gave, :mod:`planner.zero_choice`)."""

    settings: Settings
    plan: Plan | None = None
    pipeline: PipelineChoice | None = None
    why: str = ""
    timed: tuple = ()  # machine `local`: the candidates weighed in step context (executor.step_choice)
    #: the pipelined plans its search weighed: every pair (ALL), gradient accumulation's only
    #: (ONE_STAGE), none (NONE: the whole batch fits, its pipelines weighed after the ZeRO stages)
    pipelines: str = "all"
    zero_why: str = ""
    weighed: tuple = ()  # planner.zero_choice.Weighed of each ZeRO stage, when the planner chose it
    memory_note: str = ""  # the limit was lowered so the peak fits (planner.fit_check)


def first_plan(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
               limit: float | None, settings: Settings, *, machine_ref: str, fingerprint: str | None,
               zero_given: bool = True, schedule: str = SCHEDULE, prove_s: float | None = PROVE_S,
               batch_given: bool = True) -> Answer:
    """The plan (module docstring); ``limit``: bytes a device (None: the machine's memory);
    ``zero_given``: the user chose the ZeRO stage (else the fastest stage is the planner's choice,
    :mod:`planner.zero_choice`); ``batch_given``: the user chose the batch (else a refusal names it
    with a device count)."""
    limit = float(machine.device.mem_capacity_bytes if limit is None else limit)
    compute = priced_once(compute)  # each kernel priced once over the pairs and the ZeRO stages
    # and each layer and collective, where the kernels' times are fixed for the call (priced_once)
    settings = dataclasses.replace(settings, priced=PricedLayers() if isinstance(compute, PricedOnce) else None)

    lookahead: list[int] = []  # the ZeRO stages in the order the planner weighs them, when workers may bound ahead
    stages: dict[int, Answer] = {}  # each ZeRO stage's answer, when the planner chooses the stage

    def plan_at(trial: Settings, ceiling: float | None = None) -> Answer:
        if lookahead:  # the later stages' pairs bounded by idle workers while this stage's pairs are searched
            # then the stages whose whole batch fit: their pairs are bounded after the stages (_pipelines_after)
            later = lookahead[lookahead.index(trial.choices.zero) + 1:]
            later += [x for x, a in (stages or {}).items() if a.pipelines != ALL and x not in later]
            settings.parallel.when_idle(lambda: _later_bounds(net, batch, p, machine, compute, limit, settings,
                                                              schedule, later))
        answer, note = fitting(lambda under: _at_stage(net, network_ref, batch, p, machine, compute, under, trial,
                                                       machine_ref, fingerprint, schedule, prove_s, ceiling,
                                                       defer=stages is not None),
                               answer_peak, limit,
                               lambda over, under: _refit(over, net, batch, p, machine, compute, under, trial, schedule),
                               passes=(Beaten,))
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
        if side_by_side(settings.parallel, compute) is not None:
            lookahead[:] = order
        stack = uniform_stack(net)
        floor = _floor(net, batch, p, machine) if stack is not None else 0.0
        answer, zero, weighed = fastest_stage(settings, plan_at, lambda a: _outcome(a, floor), _wrap, order)
        answer, zero, weighed = _pipelines_after(settings, pipelines_at, stages, answer, zero, weighed, floor,
                                                 stack.n if stack is not None else 0, p)
    except _NoneFits as err:
        most = settings if zero_given or settings.choices.zero else settings.with_zero(max(ZERO_STAGES))
        raise refusal(net, batch, p, machine, compute, limit, most, err.pipelined, batch_given) from None
    return _chosen(answer, zero, weighed)


def _later_bounds(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                  settings: Settings, schedule: str, later: list[int]) -> tuple:
    """``(pair_bound, tasks, keys)``: the pairs' bounds the ZeRO stages ``later`` will ask for
    (:func:`planner.pipeline.pair_bounds.bound_tasks`), for workers to compute while the command
    searches a stage's pairs and closes their gaps."""
    tasks = [task for z in later for task in bound_tasks(net, batch, p, machine, compute, limit,
                                                         settings.with_zero(z), schedule)]
    return pair_bound, tasks, pair_keys(tasks)


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
    choice = search_pipeline(net, batch, p, machine, compute, under, dataclasses.replace(settings, budget=grace),
                             stage_counts=(c.stages,), micro_counts=(c.micro_batches,), schedule=kept, prove_s=0.0)
    # its gap over every layout: the first search's lower bound holds under the lower limit too
    lower = c.prediction.step_s * (1 - c.stats.get("proven_gap", 1.0))
    step = choice.prediction.step_s
    gap = max(choice.stats.get("proven_gap", 0.0), 1 - lower / step if step > 0 else 0.0)
    return dataclasses.replace(choice, stats={**choice.stats, "proven_gap": gap})


def _again_out_of_time(under: float) -> SearchOutOfTime:
    return SearchOutOfTime(f"no plan was found again under {under / GIB:.3f} GiB a device within the time limit",
                           hint="raise --time-limit")


def answer_peak(answer: Answer) -> float:
    """The tensors' (allocated) peak of an answer's busiest device (bytes): what the planner holds under
    its limit, lowered by what the framework reserves beside them (executor.session.plan.tensors_limit)."""
    return (answer.pipeline.prediction if answer.pipeline is not None else answer.plan).memory_allocated_bytes


def _when_nothing_fits(plan_at, settings: Settings) -> Answer:
    """The executor's own machine (a CPU): the plan without ZeRO, else with ZeRO-1, then ZeRO-3,
    when nothing fits without (module docstring)."""
    for zero in CPU_ZERO_TRIED:
        trial = settings.with_zero(zero)
        try:
            answer = plan_at(trial)
        except _NoneFits:
            if zero == CPU_ZERO_TRIED[-1]:
                raise
            continue
        more = f"nothing fits without ZeRO, so the optimiser state is sharded (ZeRO-{zero})" if zero else ""
        return dataclasses.replace(answer, zero_why=more)
    raise AssertionError("unreachable")


def _at_stage(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
              limit: float, settings: Settings, machine_ref: str, fingerprint: str | None, schedule: str,
              prove_s: float | None, ceiling: float | None = None, defer: bool = False) -> Answer:
    """The plan under ``settings``' ZeRO stage (module docstring); :class:`_NoneFits` when none fits;
    ``ceiling``: a step held from another stage (pipelines that cannot beat it are not searched,
    :class:`Beaten` when none is left); ``defer``: where the whole batch fits, its pipelines are
    weighed after every ZeRO stage's plan (:func:`_pipelines_after`), gradient accumulation only
    where its memory limit binds. Where the devices outnumber the batch's samples and the memory
    limit binds the whole batch, the pipelined plans are weighed first (:func:`_pipelines_first`)."""
    stack = uniform_stack(net) is not None and machine.device.kind != "cpu"
    # the whole batch's bounds are no bounds over the pipelined plans: passed on no higher than their floor
    whole = dataclasses.replace(settings, budget=partial(settings.budget, _floor(net, batch, p, machine))) \
        if stack else settings
    few = stack and p > batch  # the devices outnumber the samples: a pipeline likely wins (_pipelines_first)
    try:  # a transformer's whole batch under the step held: it ends once its bounds reach it
        plan = make_plan(net, network_ref, batch, p, machine, compute, limit, whole, machine_ref=machine_ref,
                         profile_fingerprint=fingerprint, suggest=False, unbound_only=few,
                         ceiling=ceiling if stack else None)
    except Binding:
        return _pipelines_first(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref,
                                fingerprint, schedule, prove_s, ceiling)
    except Slower as err:  # its pipelines may still beat the step held
        return _pipelines_first(net, network_ref, batch, p, machine, compute, limit, settings, machine_ref,
                                fingerprint, schedule, prove_s, ceiling, whole_lower=err.lower_s)
    except Infeasible as err:
        if uniform_stack(net) is None:
            raise _NoneFits(False) from err
        why = (f"no plan of the whole batch at once fits: the least any needs is {err.need_bytes / GIB:.1f} GiB a "
               f"device, over the {limit / GIB:.1f} GiB limit")
    else:
        return _pipelined(net, batch, p, machine, compute, limit, settings, plan, schedule, prove_s, ceiling, defer)
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit, settings, schedule=schedule, prove_s=prove_s,
                                 ceiling=ceiling)
    except NotFaster as err:
        raise Beaten(ceiling, err.lower_s) from None
    except NoPipelineFits:
        _out_of_time(settings)
        raise _NoneFits(True) from None
    return Answer(settings, pipeline=choice, why=why)


def _out_of_time(settings: Settings) -> None:
    """:class:`SearchOutOfTime` (or Ctrl-C's ``KeyboardInterrupt``) when the time limit ended a search
    that found nothing; else nothing."""
    if settings.budget is not None and settings.budget.expired():
        settings.budget.check()
        raise SearchOutOfTime(f"no plan was found within the {settings.budget.stated_s:g} s time limit",
                              hint="raise --time-limit")


def _floor(net: Network, batch: int, p: int, machine: Machine) -> float:
    """The least step any plan of ``net`` can take on ``p`` devices: its arithmetic at the highest
    peak it runs at (:func:`planner.pipeline.triples.physics_floor`, one stage, no bubble)."""
    return physics_floor(net, batch, p, machine)(1, 1, 1)


def _pipelines_first(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
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
    floor = _floor(net, batch, p, machine)
    choice, piped, fits = None, float("inf"), True
    try:
        choice = search_pipeline(net, batch, p, machine, compute, limit,
                                 dataclasses.replace(settings, budget=partial(budget, floor if whole_lower is None
                                                                              else whole_lower)),
                                 schedule=schedule, prove_s=prove_s, ceiling=ceiling)
    except (NotFaster, SearchOutOfTime) as err:
        piped = err.lower_s
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
            whole = _outcome(Answer(settings, plan=plan)).lower_s
    if choice is not None and (plan is None or choice.prediction.step_s <= plan.step_s):
        step = choice.prediction.step_s
        gap = max(choice.stats.get("proven_gap", 0.0), 1 - whole / step if 0 < whole < step else 0.0)
        held = "" if plan is None else f" (its fastest found: {plan.step_s:.4g} s a step)"
        why = (f"no plan of the whole batch at once beats {ceiling:.4g} s a step (its bounds), the step held"
               if whole_lower is not None else
               f"the devices outnumber the batch's samples ({p} > {batch}): the pipelined plans weighed first, "
               f"then the whole batch at once under their step{held}")
        return Answer(settings, pipeline=dataclasses.replace(choice, stats={**choice.stats, "proven_gap": gap}),
                      why=why)
    if plan is not None:
        return _unbeaten(settings, plan, piped)
    _out_of_time(settings)
    if (not fits and whole == float("inf")) or not steps:
        raise _NoneFits(True)
    raise Beaten(min(steps), min(piped, whole))


def _outcome(answer: Answer, floor: float = 0.0) -> Weighed:
    """A stage's answer as :mod:`planner.zero_choice` weighs it: its step, proven lower bound, and
    whether the memory limit held it back (anything but the whole batch's unconstrained optimum);
    ``floor``: the least step of the pipelined plans the answer has not weighed yet (their physics
    floor)."""
    if answer.pipelines != ALL:
        own = _outcome(dataclasses.replace(answer, pipelines=ALL))
        return dataclasses.replace(own, lower_s=min(own.lower_s, floor))
    if answer.pipeline is not None:
        step = answer.pipeline.prediction.step_s
        return Weighed(answer.settings.choices.zero, step, step * (1 - answer.pipeline.stats.get("proven_gap", 1.0)))
    solver = answer.plan.solver
    optimal = solver.get("status") == "optimal"
    gap = 0.0 if optimal else solver.get("gap")
    free = optimal and solver.get("memory_binding") is False
    step = answer.plan.step_s
    return Weighed(answer.settings.choices.zero, step, 0.0 if gap is None else step * (1 - gap), bound=not free)


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
    step = _step_of(answer)
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
    each = "; ".join(f"ZeRO-{w.zero} {w.step_s:.4g} s a step" if w.step_s is not None else
                     f"ZeRO-{w.zero} {w.skipped}" for w in weighed)
    return dataclasses.replace(answer, weighed=tuple(weighed),
                               zero_why=f"ZeRO-{zero} is the fastest of the ZeRO stages weighed ({each})")


def _pipelined(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
               settings: Settings, plan: Plan, schedule: str, prove_s: float | None,
               ceiling: float | None = None, defer: bool = False) -> Answer:
    """The answer where the whole batch at once fits (module docstring): the pipeline search under
    ``plan``'s step as its ceiling (and ``ceiling``'s, a step held from elsewhere: a pair whose bound
    reaches it is not searched); its plan when faster, else ``plan`` with its gap counting the
    pipelined plans' least step (the pairs' bounds; their physics floor where the time limit left
    none to search), so an answer is called optimal only where no pipeline can beat it; ``defer``:
    accumulation only, where the memory limit binds (the rest after the ZeRO stages: :func:`_pipelines_after`)."""
    cpu = machine.device.kind == "cpu"  # the executor's own machine: accumulation where memory binds
    binds = bool(plan.solver.get("memory_binding"))
    if uniform_stack(net) is None or (cpu and not binds):
        return Answer(settings, plan=plan)
    if defer and not binds:
        return Answer(settings, plan=plan, pipelines=NONE)
    held = plan.step_s if ceiling is None else min(plan.step_s, ceiling)
    budget = settings.budget
    if budget is not None and budget.expired():
        return _unbeaten(settings, plan, _floor(net, batch, p, machine), defer)
    own = plan.step_s * (1 - (plan.solver.get("gap") or 0.0))  # the whole batch's lower bound
    cap = min(own, _floor(net, batch, p, machine)) if defer else own  # defer: the other pipelines pending
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
           f"the whole batch at once fits at {plan.step_s:.4g} s a step, and a pipeline is faster")
    return Answer(settings, pipeline=choice, why=why, pipelines=ONE_STAGE if defer else ALL)


def _unbeaten(settings: Settings, plan: Plan, lower_s: float, defer: bool = False) -> Answer:
    """``plan`` as the answer, its proven gap widened to what a pipelined plan could still take
    (``lower_s``, the least step of any pipelined plan)."""
    step = plan.step_s
    gap = 1 - lower_s / step if 0 < step and lower_s < step else 0.0
    if gap > (plan.solver.get("gap") or 0.0) and gap > 1e-12:
        plan = dataclasses.replace(plan, solver={**plan.solver, "gap": gap, "status": "feasible"})
    return Answer(settings, plan=plan, pipelines=ONE_STAGE if defer else ALL)


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
    step = _step_of  # an answer's step, whole batch or pipelined
    for got in sorted((a for a in stages.values() if a.pipelines != ALL), key=step):
        z = got.settings.choices.zero
        counts = None if got.pipelines == NONE else tuple(s for s in divisors(p) if 1 < s <= blocks)
        own = _outcome(dataclasses.replace(got, pipelines=ALL)).lower_s  # the whole batch's (or accumulation's)
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
                    answer, zero = dataclasses.replace(
                        found, memory_note=note, why=f"{what} at {step(got):.4g} s a step, and a pipeline is faster"), z
                    by[z] = dataclasses.replace(by[z], step_s=min(by[z].step_s, got_step))
        before = by[z].lower_s
        by[z] = dataclasses.replace(by[z], lower_s=min(own, lower))
        for x in (2, 3):  # ZeRO-2 and ZeRO-3 skipped on this stage's plan (planner.zero_choice._skip)
            w, source = by.get(x), 1 if x == 2 or by.get(2) is None or by[2].step_s is None else 2
            if w is not None and source == z and w.step_s is None and w.skipped.startswith("not planned (its step") \
                    and w.lower_s == before:
                by[x] = dataclasses.replace(w, lower_s=by[z].lower_s)
    return answer, zero, [by[z] for z in sorted(by)]


def _step_of(answer: Answer) -> float:
    """An answer's step: its pipeline's, else its plan's."""
    return answer.pipeline.prediction.step_s if answer.pipeline is not None else answer.plan.step_s


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
