"""Running a plan's training steps on the ranks of a communicator: :func:`run_plan`, one stage on
every rank (executor.runtime.stage) or a pipeline of stages (executor.runtime.pipeline), on the
device :func:`executor.backend.select.select_backend` picks for the plan."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from executor.backend.device import Backend, Communicator, DeviceMemory, EventClock, LaunchBound, on_host
from executor.backend.select import select_backend
from executor.check.gradients import CheckResult, local_parts, run_check
from executor.check.reference import plan_shards
from executor.runtime.graphs import EAGER, GRAPHS, CaptureFailed, StepMode, fell_back, step_mode
from executor.runtime.pipeline import PipelineRuntime
from executor.runtime.stage import _Runtime
from executor.runtime.timers import Timers
from executor.check.zero import check_zero
from networks.errors import DnnplanError
from networks.ir import Network
from planner.plan.plan import Plan

#: The repository's root (:func:`_where` names frames under it)
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunResult:
    """``loss``: the first step's loss (initial weights, the one the check compares);
    ``losses``: every executed step's loss in order, warm-up first; ``step_s``: this rank's wall
    time of each timed step; ``check``: the comparison with the reference, when asked for;
    ``peak_bytes``: this rank's peak memory in the memory step (executor.backend.host_memory)."""

    loss: float
    losses: list[float]
    step_s: list[float]
    check: CheckResult | None = None
    peak_bytes: int | None = None  # this rank's peak of the arrays it held in a step (Backend.peak_bytes)
    mode: StepMode = StepMode(EAGER)  # how the timed steps ran: eager, or replayed as a CUDA graph (and why not)



def run_plan(plan: Plan, net: Network, comm, *, steps: int = 5, warmup: int = 2, check: bool = False,
             seed: int = 0, timers: Timers | None = None, lr: float = 1e-4,
             momentum: float = 0.9, after_step: Callable[[int], None] | None = None,
             measure_memory: bool = True, backend: Backend | None = None, graphs: bool | None = None) -> RunResult:
    """Run ``warmup`` + ``steps`` training steps of ``plan`` on the ranks of ``comm`` (collective).

    The learning rate is small on purpose: on random data a learning rate of 0.01 drove AlexNet's
    loss (batch 2) to 1.7e17 by the fourth step and to NaN after, so the timed steps computed on
    infinities; with 1e-4 the losses of alexnet, lenet5 and resnet18 stayed finite over 12 steps,
    and the kernels run the same work.

    ``comm`` is the launcher's MPI communicator (mpi4py) of exactly ``plan.devices`` ranks; the
    ranks compute and communicate on ``backend`` (None: :func:`select_backend`'s for the plan),
    whose clock ``timers`` then read. Every rank returns the
    same losses and check; ``step_s`` is this rank's own clock. ``after_step(i)`` runs after each
    warm-up step (``i`` negative) and after each of as many untimed steps run after the timed ones
    (``i`` from 0, :func:`in_run_steps`), outside every clock (``--fresh-profile``'s in-run timing).
    ``measure_memory``: then one more step runs after the timed ones, untimed, to measure this
    rank's peak memory (``Backend.peak_bytes``; ``RunResult.peak_bytes``). ``graphs``: replay each
    timed step as one captured CUDA graph (True), run them eagerly (False), or replay where the plan
    and device allow it (None; executor.runtime.graphs); ``RunResult.mode`` says which ran.
    """
    if steps < 0 or warmup < 0 or steps + warmup < 1:
        raise DnnplanError(f"need at least one step (steps={steps}, warmup={warmup})")
    backend = backend if backend is not None else select_backend(plan)
    group = backend.communicator(comm)
    timers = timers if timers is not None else Timers()
    timers.clock = backend.now_s
    timers.events = backend if isinstance(backend, EventClock) else None
    mode = step_mode(plan, net, backend, steps, warmup, graphs)
    if plan.pipeline is not None:
        if plan.choices.zero:
            raise DnnplanError("the executor runs pipelined plans without ZeRO", hint="plan again with --zero 0")
        got = _run_pipeline(plan, net, group, backend, steps, warmup, check, seed, timers, lr, momentum,
                            after_step, measure_memory)
        return replace(got, mode=mode)
    rt = _Runtime(plan, net, group, backend, seed, timers, check)
    losses, kept, peak, failed = _train(rt, group, timers, steps, warmup, check, lr, momentum, after_step,
                                        measure_memory, mode.mode == GRAPHS, fallback=graphs is None)
    mode = fell_back(failed) if failed is not None else mode
    result = None
    if check:
        mine = local_parts(net.layers, rt.strategies, group.rank, _host(backend, kept))
        result = run_check(group, net, plan.batch, rt.algorithms, seed, losses[0], mine,
                           backend if isinstance(backend, DeviceMemory) else None, plan.choices.precision,
                           plan_shards(net, plan.strategies(), plan.batch))
        if plan.choices.zero:
            attributed = 1 if attributes_apart(backend) and steps > 0 else 0
            ran = steps + attributed + in_run_steps(steps, after_step) + (1 if measure_memory else 0)
            schedule = [(i, i == -warmup) for i in range(-warmup, ran)]
            unsharded = replace(rt.plan, choices=rt.plan.choices.but(zero=0))
            result = check_zero(rt, lambda: _Runtime(unsharded, rt.net, rt.comm, backend, rt.seed,
                                                     Timers(clock=backend.now_s), False),
                                result, schedule, lr, momentum)
    rt.comms.free()  # collective: only on success (after a failure the launcher aborts the job)
    step_s = [timers.step_wall[i] for i in range(steps)]
    return RunResult(losses[0], losses, step_s, result, peak, mode)



def _host(backend: Backend, kept: dict) -> dict:
    """The check's gradients as host arrays (copied from a device's memory)."""
    return {key: on_host(backend, g) for key, g in kept.items()}


def _line_up(rt, comm: Communicator) -> None:
    """Every rank's work so far done on its device, then the ranks together: a step starts here."""
    rt.backend.synchronize()
    comm.barrier()


def _train(rt, comm: Communicator, timers: Timers, steps: int, warmup: int, check: bool, lr: float,
           momentum: float, after_step, measure_memory: bool, graphed: bool = False,
           fallback: bool = False) -> tuple[list[float], dict | None, int | None, CaptureFailed | None]:
    """The steps of a runtime (one stage or a pipeline): every loss, the gradients of the step the
    check compares, this rank's peak memory in one more step run with its memory traced
    (``Backend.peak_bytes``; its times dropped, so it never counts as a timed step), and the failed
    capture the timed steps fell back from (else None). ``graphed``: the timed steps are replays of
    one step captured after the warm-up (executor.runtime.graphs); ``fallback``: a capture the
    device refuses leaves them eager instead of ending the run."""
    losses, kept = [], None
    apart = attributes_apart(rt.backend)
    timers.attributing = not apart

    def eager(indices) -> None:
        nonlocal kept
        for i in indices:
            _line_up(rt, comm)
            loss, grads = rt.step(i, lr, momentum, keep_grads=check and not losses)
            losses.append(float(loss))  # read after the step's clock stopped: the loss stays on the device in it
            kept = grads if grads is not None else kept
            if after_step is not None and i < 0:
                after_step(i)

    eager(range(-warmup, 0 if graphed else steps))
    failed = None
    if graphed:
        try:
            losses += _replayed(rt, comm, timers, steps, lr, momentum)
        except CaptureFailed as err:
            if not fallback:
                raise
            failed = err
            eager(range(steps))
    timers.attributing = True
    first = steps
    if apart and steps > 0:  # the timed steps' per-layer times: one eager step with every span
        _line_up(rt, comm)
        rt.step(first, lr, momentum, keep_grads=False)
        timers.attribution_step(first)
        first += 1
    extra = in_run_steps(steps, after_step)
    for k in range(extra):
        _line_up(rt, comm)
        rt.step(first + k, lr, momentum, keep_grads=False)
        timers.forget(first + k)
        after_step(k)
    if not measure_memory:
        return losses, kept, None, failed
    last = first + extra
    _line_up(rt, comm)
    traced = rt.backend.peak_bytes(lambda: rt.step(last, lr, momentum, keep_grads=False))
    timers.forget(last)
    return losses, kept, rt.backend.held_bytes(rt.held()) + traced, failed


def _replayed(rt, comm: Communicator, timers: Timers, steps: int, lr: float, momentum: float) -> list[float]:
    """One step captured (nothing marked, nothing done), then replayed for each timed step, each
    replay timed by the step's two marks; the losses the replays left in the captured loss array."""
    def one_step():  # marks nothing: a mark would be recorded into the graph
        timers.recording = False
        try:
            return rt.step(steps, lr, momentum, keep_grads=False)
        finally:
            timers.recording = True

    _line_up(rt, comm)
    try:
        graph, (loss, _) = rt.backend.capture(one_step)
    except DnnplanError as err:  # a call the capture cannot hold, said as one line by the code that made it
        raise CaptureFailed(f"capturing a training step as a CUDA graph failed ({err.bare})",
                            hint="run the plan eagerly with --no-graphs") from None
    except Exception as err:  # noqa: BLE001 - the device refused the capture: one line, not a traceback
        raise CaptureFailed(f"capturing a training step as a CUDA graph failed ({type(err).__name__}: "
                            f"{str(err)[:200]}{_where(err)})", hint="run the plan eagerly with --no-graphs") from None
    losses = []
    for i in range(steps):
        _line_up(rt, comm)
        timers.begin_step(i)
        rt.backend.replay(graph)
        timers.end_step()
        losses.append(float(loss))
    return losses


def _where(err: BaseException) -> str:
    """Where in dnnplan's own code a refused capture failed, for a bug report (' at FILE:LINE'; '' when
    no frame of the repository's is on the traceback)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(str(ROOT))]
    return f" at {Path(frames[-1].filename).relative_to(ROOT)}:{frames[-1].lineno}" if frames else ""


def attributes_apart(backend: Backend) -> bool:
    """Whether the timed steps run without spans, and one attribution step after them gives the
    per-layer times (a device whose launches cost the host time, executor.runtime.timers)."""
    return isinstance(backend, LaunchBound) and backend.fuse_launches()


def in_run_steps(steps: int, after_step) -> int:
    """Untimed steps run after the timed ones, each followed by ``after_step`` (the in-run
    timing): as many as the timed steps, none without it. The timed steps run back to back, as
    training runs them: timed between them, the kernels leave the caches and the heap to the next
    step in another state than the step before left them, and lenet5's step on two ranks measured
    8.0 ms with that timing between steps against 6.0 to 6.7 ms without (2026-11-26)."""
    return steps if after_step is not None else 0


def _run_pipeline(plan: Plan, net: Network, comm: Communicator, backend: Backend, steps: int, warmup: int,
                  check: bool, seed: int, timers: Timers, lr: float, momentum: float, after_step,
                  measure_memory: bool) -> RunResult:
    """:func:`run_plan` of a pipelined plan (executor.runtime.pipeline); the check gathers each stage's
    gradient shards (regions over the stage's own ranks) and compares them with one process."""
    pipe = PipelineRuntime(plan, net, comm, backend, seed, timers)
    losses, kept, peak, _ = _train(pipe, comm, timers, steps, warmup, check, lr, momentum, after_step,
                                   measure_memory)
    result = None
    if check:
        mine = local_parts(pipe.layers, pipe.rt.strategies, pipe.i, _host(backend, kept))
        result = run_check(comm, net, plan.batch, plan.algorithms(), seed, losses[0], mine,
                           shards=plan_shards(net, plan.strategies(), plan.batch, plan.pipeline.micro_batches))
    pipe.free()
    return RunResult(losses[0], losses, [timers.step_wall[i] for i in range(steps)], result, peak)
