"""What `dnnplan plan --sweep` does, as library calls: every (machine, device count) planned, one
after another or in worker processes (``--sweep-jobs``), each point's row handed to the caller as it
is made.

:func:`contexts` resolves the network on every machine first (a bad machine name is one line before
anything is planned). :func:`run` plans the points count by count, every machine at each (the
small counts, where nothing may fit and a point ends at once, come first, and the time they leave
goes to the larger counts; planner.sweep.point), each within its own bound: the per-point bound
given (``--time-limit``), or its share of what is left of the sweep's whole bound
(planner.sweep.point_seconds). With ``jobs`` above 1 the points are planned in that many forked
worker processes, each point's share of what is left set when a worker takes it; this parallelism
is the sweep's own, over its points, apart from any inside the planner's search of one point. A
worker the system ends while it plans a point (the out-of-memory killer, a crash) makes that point's
row say so (lifecycle.forked_workers); the other points are planned.

Ctrl-C: the point being planned stops (its budget shares the caller's stop request), the workers
are ended, ``KeyboardInterrupt`` reaches the caller, and the rows made so far are what it keeps.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from costmodel.choices.training import TrainingChoices
from costmodel.step.train_time import tokens_per_step
from executor.session import plan as planning
from executor.session.plan import PlanRequest, check_plannable, settings_for
from lifecycle.forked_workers import Lost, each_forked
from networks.errors import DnnplanError
from planner.problem.full_profile import refreshed
from planner.problem.solve import strategy_mix
from planner.refusal import NoPlanFits
from planner.solvers import Budget
from planner.sweep import mark_best, point, point_seconds, priced, refused, with_speedups
from profiler import context
from profiler.context import Context


@dataclass(frozen=True)
class SweepRequest:
    """A sweep: the network as the user named it, the machines and device counts, and how each
    point is planned and priced."""

    network: str
    machines: tuple[str, ...]
    counts: tuple[int, ...]
    devices: int = 1  # --devices: the default batch is the one of this count
    batch: int | None = None
    profile: str | None = None
    refresh: bool = False
    choices: TrainingChoices = TrainingChoices()
    foreign_profile: bool = False
    memory_limit_bytes: float | None = None
    solver: str = "auto"
    gap: float | None = None
    with_data: bool = True  # each point beside pure data parallelism (strong scaling on one machine)
    #: each point as `dnnplan plan` answers it: pipelined where nothing fits whole (else a comparison of
    #: machines or of time to train weighs each point's ZeRO stages on the whole batch, as --pipeline off)
    pipelines: bool = False
    tokens: float | None = None  # a token budget: each point's time and cost to train it
    prices: dict | None = None  # machine -> price a device-hour
    point_s: float | None = None  # each point's search bound; None: a share of total_s
    total_s: float = 30.0  # the sweep's whole search bound, shared (when point_s is None)
    most_s: float | None = None  # the most one point's share may be
    jobs: int = 1

    @property
    def size(self) -> int:
        return len(self.machines) * len(self.counts)


def contexts(request: SweepRequest) -> dict[str, Context]:
    """Each machine's context (the network loaded, the machine and its compute model), in the order
    named; a bad machine or profile is one line (DnnplanError) before any point is planned."""
    if request.jobs > 1 and "local" in request.machines:
        raise DnnplanError("--sweep-jobs plans in worker processes, and machine `local` times kernels on this "
                           "computer as it plans", hint="drop --sweep-jobs for machine local")
    out = {}
    for name in request.machines:
        ctx = context.resolve(request.network, request.devices, request.batch, name, request.profile,
                              request.refresh, request.choices, request.foreign_profile, network_defaults=True)
        check_plannable(ctx)  # a framework whose step the planner does not price: one line, before any point
        if request.batch is None:  # one batch at every point, the default at one count: said with its count
            at = request.devices
            ctx = dataclasses.replace(ctx, batch_rule=f"{ctx.batch_rule}, at {at} device{'s' * (at > 1)}")
        out[name] = ctx
    return out


def run(request: SweepRequest, ctxs: dict[str, Context], budget: Budget, on_row: Callable[[dict], None],
        plan: Callable[..., dict] | None = None) -> None:
    """Plan every point (module docstring), calling ``on_row`` with each row as it is made; ``plan``
    plans one point (:func:`plan_point`, or a test's stand-in)."""
    plan = plan or plan_point
    # a machine whose kernels are timed here as it is planned (a CPU: `local`) last, so the other
    # machines' points, seconds each, are in the table when a stop comes during its minutes of timing
    points = sorted(((m, p) for p in request.counts for m in request.machines),
                    key=lambda point: ctxs[point[0]].machine.device.kind == "cpu")
    if request.jobs > 1 and len(points) > 1:
        _in_workers(request, ctxs, points, on_row, plan)
        return
    start = time.perf_counter()
    for k, (name, p) in enumerate(points):
        seconds = request.point_s if request.point_s is not None else point_seconds(
            request.total_s - (time.perf_counter() - start), len(points) - k, 1, request.most_s)
        # a point's messages name its own bound, as a point planned in a worker does (Budget(seconds))
        on_row(plan(request, ctxs[name], name, p, budget.renewed(seconds, stated_s=seconds)))


def plan_point(request: SweepRequest, ctx: Context, name: str, devices: int, budget: Budget) -> dict:
    """One point's row (planner.sweep.point) under ``budget``, named with its machine and priced."""
    started = time.perf_counter()
    settings = settings_for(ctx, request.solver, request.gap, budget)
    if request.pipelines or not request.with_data:  # a comparison: each point's ZeRO stage weighed
        row = _answered(request, dataclasses.replace(ctx, devices=devices), name, settings,
                        None if request.pipelines else "off")
    else:
        row = refreshed(ctx.compute, lambda: point(ctx.network, request.network, ctx.batch, devices, ctx.machine,
                                                    ctx.compute, request.memory_limit_bytes, settings,
                                                    with_data=request.with_data), budget.forget)
    row = {"machine": name, **row, "planned_in_s": round(time.perf_counter() - started, 3)}
    per_step = tokens_per_step(ctx.network, ctx.batch) if request.tokens is not None else _tokens_or_none(ctx)
    price = None if request.prices is None else request.prices[name]
    return priced(row, ctx.batch, per_step, request.tokens, price)


def _answered(request: SweepRequest, ctx: Context, name: str, settings, pipeline: str | None = None) -> dict:
    """One point planned as `dnnplan plan` plans it (executor.session.plan.plan: the ZeRO stages
    weighed, the pipeline search where nothing fits whole; ``pipeline`` "off": as `--pipeline off`,
    the whole batch at once under each ZeRO stage), as a row like planner.sweep.point's, with the
    pipeline chosen, if any."""
    ask = PlanRequest(request.network, name, None, request.memory_limit_bytes, pipeline=pipeline, step_context=False,
                      batch_given=request.batch is not None)
    try:
        ctx.machine.check_devices(ctx.devices)
        answer, made = planning.finished(ctx, ask, settings, planning.plan(ctx, ask, settings))
    except NoPlanFits as err:  # the least any plan needs beside the limit: the counts so refused share a note
        return refused(ctx.devices, err, err.need_bytes, err.limit_bytes)
    except DnnplanError as err:
        return {"devices": ctx.devices, "error": str(err)}
    solver = made.solver
    row = {"devices": ctx.devices, "step_s": made.step_s, "memory_peak_bytes": made.memory_peak_bytes,
           "mfu": made.mfu, "mix": strategy_mix(made), "zero": made.choices.zero,
           "solver": solver.get("solver", solver.get("method")),
           "status": solver.get("status"), "gap": solver.get("gap", solver.get("proven_gap"))}
    got = answer.pipeline
    if got is not None:
        row["pipeline"] = {"stages": got.stages, "micro_batches": got.micro_batches, "chunks": got.chunks}
        row["status"] = "optimal" if not row["gap"] else "feasible"
    return row


def _tokens_or_none(ctx: Context) -> int | None:
    """The tokens a step takes, for a language model (its throughput in tokens); None for another."""
    try:
        return tokens_per_step(ctx.network, ctx.batch)
    except DnnplanError:
        return None


def ordered(request: SweepRequest, rows: list[dict]) -> list[dict]:
    """The rows in the sweep's order (machines as named, then device counts), each with its speedup
    over its machine's first count with a plan and, comparing (``not request.with_data``), the
    fastest and the cheapest marked."""
    rank = {m: k for k, m in enumerate(request.machines)}
    out = with_speedups(sorted(rows, key=lambda r: (rank[r["machine"]], r["devices"])))
    return out if request.with_data else mark_best(out)


# --- points in worker processes ------------------------------------------------------------------

def _in_workers(request: SweepRequest, ctxs: dict[str, Context], points: list[tuple[str, int]],
                on_row: Callable[[dict], None], plan: Callable[..., dict]) -> None:
    """The points planned in ``request.jobs`` forked processes, ``jobs`` at a time, each handed out
    with its share of what is left of the sweep's bound as a worker frees (rows arrive as points
    finish, in any order). A point whose worker the system ends (out of memory, a crash) is a row
    saying so (``"lost": true``), and the other points are planned."""
    jobs = min(request.jobs, len(points))
    start, todo = time.perf_counter(), list(reversed(points))
    one = dataclasses.replace(request, jobs=1)  # forked, each worker holds it and the contexts as they are here

    def tasks() -> Iterator[tuple[str, int, float]]:
        while todo:
            name, p = todo.pop()
            seconds = request.point_s if request.point_s is not None else point_seconds(
                request.total_s - (time.perf_counter() - start), len(todo) + 1, jobs, request.most_s)
            yield name, p, seconds

    def planned(task: tuple[str, int, float]) -> dict:
        name, p, seconds = task
        return plan(one, ctxs[name], name, p, Budget(seconds))

    answers = each_forked(planned, tasks(), jobs)
    try:
        for (name, p, _), got in answers:
            on_row(_lost_row(name, p, got.how) if isinstance(got, Lost) else got)
    finally:  # Ctrl-C, a failed write: the workers end with the sweep
        answers.close()


def _lost_row(name: str, devices: int, how: str) -> dict:
    """The row of a point whose worker ended before it answered."""
    return {"machine": name, "devices": devices, "error": f"its worker process {how}", "lost": True}
