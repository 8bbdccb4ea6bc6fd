"""When no plan fits: the flags and numbers that would make one exist, each checked (pure).

Each alternative named is tried, not guessed: a plan without pipelining exists with it when the
least memory any assignment of the planner's candidates needs fits the limit (``min_memory`` of the
nodes-only problem: exact, and the solver then finds such a plan); for a stack of identical blocks,
a plan exists when gradient accumulation at micro-batches of one sample fits (one stage), or a
pipeline's balanced cut's stages do (:func:`_pipeline_fits`); the memory named is the least of the
whole batch at once and of accumulation. Tried, with everything else as given: more devices (doubling, up to 64
times as many, within the machine), a smaller batch (halving), a ZeRO stage (when none was asked
for), and the memory a device would need.
"""

from __future__ import annotations


from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from networks.errors import DnnplanError
from networks.ir import Network
from costmodel.layer.candidates import divisors
from planner.problem.build import Builder, build_problem, build_with
from planner.problem.solve import Settings
from planner.solvers import Budget, min_memory
from planner.pipeline.stack import FIRST, LAST, MIDDLE, ONLY, uniform_stack

GIB = 2.0 ** 30


def least_memory(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
                 settings: Settings) -> float:
    """The least memory a device needs under any plan without pipelining (bytes)."""
    built = build_problem(net, batch, p, machine, compute, None, settings.choices.sharded_optimizer, edges=False,
                          recompute=settings.choices.may_recompute)
    return min_memory(built.problem)[0]


def _fits(net, batch, p, machine, compute, settings, limit, pipelines: bool = True) -> bool:
    """A plan fits: the whole batch at once, or (``pipelines``: not ``--pipeline off``) pipelined or accumulated."""
    return (least_memory(net, batch, p, machine, compute, settings) <= limit * (1 + 1e-9)
            or pipelines and _pipeline_fits(net, batch, p, machine, compute, settings, limit))


def accumulation_memory(net, p, machine, compute, settings) -> float | None:
    """The least memory a device needs under gradient accumulation (one stage, every layer on all
    ``p`` devices, micro-batches of one sample: the pipeline search's one-stage plans), for a stack
    of identical blocks (bytes; None: not a stack, never accumulated)."""
    stack = uniform_stack(net)
    if stack is None:
        return None
    builder = Builder(1, p, machine, compute, settings.choices.sharded_optimizer,
                      recompute=settings.choices.may_recompute, overlap=settings.overlap, priced=settings.priced)
    return min_memory(build_with(builder, stack.stage(stack.n, ONLY), None, edges=False, kept=1).problem)[0]


def _pipeline_fits(net, batch, p, machine, compute, settings, limit) -> bool:
    """A pipelined plan fits (a stack of identical blocks only): gradient accumulation at
    micro-batches of one sample (:func:`accumulation_memory`), or for some stage count ``S``, stages of
    ``ceil(n / S)`` blocks on ``p / S`` devices, at micro-batches of one sample under 1F1B, fit as the
    first stage (holding ``S`` micro-batches' activations), a middle one (``S - 1``) and the last (one),
    each by its least memory (so the balanced cut fits, and the pipeline search finds a plan)."""
    stack = uniform_stack(net)
    if stack is None:
        return False
    if accumulation_memory(net, p, machine, compute, settings) <= limit * (1 + 1e-9):
        return True
    for stages in sorted((s for s in divisors(p) if 1 < s <= stack.n), reverse=True):
        k = -(-stack.n // stages)
        builder = Builder(1, p // stages, machine, compute, settings.choices.sharded_optimizer,
                          recompute=settings.choices.may_recompute, overlap=settings.overlap,
                          priced=settings.priced)
        roles = ((FIRST, stages), (MIDDLE, stages - 1), (LAST, 1)) if stages > 2 else ((FIRST, 2), (LAST, 1))
        if batch >= stages and all(min_memory(build_with(builder, stack.stage(k, role), None, edges=False,
                                                         kept=kept).problem)[0] <= limit * (1 + 1e-9)
                                   for role, kept in roles):
            return True
    return False


def _more_devices(net, batch, p, machine, compute, settings, limit, budget, pipelines: bool = True) -> int | None:
    q = p * 2
    while q <= p * 64 and not _late(budget):
        try:
            machine.check_devices(q)
        except DnnplanError:
            return None
        if _fits(net, batch, q, machine, compute, settings, limit, pipelines):
            return q
        q *= 2
    return None


def _smaller_batch(net, batch, p, machine, compute, settings, limit, budget, pipelines: bool = True) -> int | None:
    b = batch // 2
    while b >= 1 and not _late(budget):
        if _fits(net, b, p, machine, compute, settings, limit, pipelines):
            return b
        b //= 2
    return None


def _zero(net, batch, p, machine, compute, settings, limit, budget, pipelines: bool = True) -> int | None:
    if settings.choices.zero:
        return None
    for stage in (1, 2, 3):
        if _late(budget):
            return None
        trial = settings.with_zero(stage)
        if _fits(net, batch, p, machine, compute, trial, limit, pipelines):
            return stage
    return None


def _late(budget: Budget | None) -> bool:
    return budget is not None and budget.stop_requested


def refusal(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
            settings: Settings, pipelined: bool, batch_given: bool = True, pipelines: bool = True) -> DnnplanError:
    """The error when no plan fits (``pipelined``: the pipeline search found none either), naming
    every alternative that was checked to fit (module docstring); ``batch_given``: else a device
    count is named with the batch it was checked at (the default batch follows the devices);
    ``pipelines`` False (``--pipeline off``): each alternative checked for the whole batch at once."""
    need = least_memory(net, batch, p, machine, compute, settings)
    accumulated = accumulation_memory(net, p, machine, compute, settings) if pipelined and pipelines else None
    budget = settings.budget
    found = []
    if (q := _more_devices(net, batch, p, machine, compute, settings, limit, budget, pipelines)) is not None:
        found.append(f"--devices {q}" + ("" if batch_given else f" --batch {batch}"))
    if (b := _smaller_batch(net, batch, p, machine, compute, settings, limit, budget, pipelines)) is not None:
        found.append(f"--batch {b}")
    if (z := _zero(net, batch, p, machine, compute, settings, limit, budget, pipelines)) is not None:
        found.append(f"--zero {z}")
    least = need if accumulated is None else min(need, accumulated)
    found.append(f"--memory {_up(least / GIB)} (GiB a device{', a pipeline perhaps less' if pipelined else ''})")
    how = ", with or without pipelining" if pipelined else " with the whole batch at once" if not pipelines else ""
    more = "" if accumulated is None else f" at once, {accumulated / GIB:.3f} GiB accumulating micro-batches of one sample"
    # the floors are of one stage over every device: a pipeline's stages may hold less (gpt2-xl on 6
    # devices: 7.78 GiB whole, a pipeline of 3 stages in 5.00), so they are said as that, not as any plan's
    return NoPlanFits(
        f"no plan of {net.name} at batch {batch} fits {limit / GIB:.3f} GiB per device on {p} devices{how}; "
        f"the least a plan of one stage needs is {need / GIB:.3f} GiB per device{more}",
        hint="a plan exists (checked) with " + _either(found), need_bytes=least, limit_bytes=limit)


class NoPlanFits(DnnplanError):
    """:func:`refusal`'s error, with the least any plan needs a device (``need_bytes``, accumulating
    where that needs less) and the limit it is over (a sweep's rows group the counts so refused)."""

    def __init__(self, message: str, *, hint: str, need_bytes: float, limit_bytes: float):
        super().__init__(message, hint=hint)
        self.need_bytes, self.limit_bytes = need_bytes, limit_bytes


def _up(gib: float) -> str:
    """``gib`` rounded up to three significant figures, so the suggestion is enough."""
    digits = max(0, 2 - len(str(int(gib))) + 1)
    scale = 10 ** digits
    value = -(-gib * scale // 1) / scale
    return f"{value:.{digits}f}"


def _either(options: list[str]) -> str:
    return options[0] if len(options) == 1 else ", ".join(options[:-1]) + " or " + options[-1]
