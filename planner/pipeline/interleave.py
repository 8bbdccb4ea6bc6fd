"""Interleaved 1F1B in the pipeline search: one (S, m, V) searched, and its choice predicted (pure).

Megatron-LM's interleaved schedule (Narayanan et al. SC21, section 2.2.2) cuts the blocks into
``S V`` equal chunks, device ``s`` holding chunks ``s, s + S, ...`` (:meth:`planner.pipeline.stack.Stack.
device_layers`); its step is ``m max_s T_s + (sum_s T_s - max_s T_s) / V + max_s O_s``
(``costmodel.step.pipeline``), ``T_s`` device ``s``'s forward and backward of one micro-batch over all its
chunks plus its ``V`` sends each way. The cut is fixed (every chunk ``n / (S V)`` blocks), so a
triple's search is three device solves: the first device (the layers before the blocks with its
chunks), one middle device (all middle devices hold the same layers up to their names; solved holding
device 1's in-flight micro-batches, the most of any middle device) and the last (with the layers
after). A device's memory counts each chunk's micro-batches in flight in Megatron's order
(:mod:`planner.pipeline.chunks`; the first device's first chunk holds more than its last), as
``dnnplan predict`` counts them. Each is the planner's exact per-layer problem (:class:`planner.pipeline.stage_solver.StageSolver`)
weighted ``m + (S - 1) / V``, which is how often a balanced device's ``T`` counts in the step.

A lower bound on the triple's step from its device solves, each of which bounds its device's
bracket ``L_s <= w T_s + O_s``, ``w = m + (S - 1) / V`` (its optimum, or its Lagrangian bound when a
gap is left): :func:`lower_s`, the step's formula on the times ``L_s / w``. Searched against a step
to beat, a triple is left once the devices solved so far bound it at that step (the others'
brackets at 0), and one whose device is unresolved (:mod:`planner.pipeline.chunks`) is left at its
devices' bound, never as one that fits nothing (:class:`Unplanned`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from costmodel.step.pipeline import INTERLEAVED, PipelinePrediction, StagePrediction, p2p_s, predict_pipeline
from costmodel.memory.pipeline import ChunkHold, device_hold
from costmodel.step.prediction import predict_step
from networks import durations
from networks.ir import Network
from planner.problem.solve import PlanMismatch, Settings
from planner.pipeline.chunks import Unresolved
from planner.pipeline.stack import FIRST, LAST, MIDDLE, Stack
from planner.pipeline.stage_solver import StageSolution, StageSolver


@dataclass(frozen=True)
class Interleaved:
    """One (S, m, V) searched: its step, a lower bound on its optimum, each device's solution."""

    step_s: float
    lower_s: float
    solutions: tuple[StageSolution, ...]  # per device s = 0 .. S - 1 (middle devices share one)


def role(stages: int, s: int) -> str:
    return FIRST if s == 0 else LAST if s == stages - 1 else MIDDLE


def hold(stack: Stack, stages: int, s: int, m: int, chunks: int) -> ChunkHold:
    """What device ``s`` holds, chunk by chunk in Megatron's order (costmodel.memory.pipeline)."""
    return device_hold(stages, s, m, chunks, stack.device_chunks(stages, chunks, s))


def kept(stack: Stack, stages: int, s: int, m: int, chunks: int) -> ChunkHold:
    """What device ``s`` is solved to hold: its own on the first and last device, device 1's on
    every middle one (module docstring)."""
    return hold(stack, stages, s if s in (0, stages - 1) else 1, m, chunks)


def sends_s(machine: Machine, p: int, stages: int, chunks: int, s: int, boundary: int, micro: int) -> float:
    """Device ``s``'s sends per micro-batch: each of its chunks but the last of all sends its output
    to the next chunk's device, and that device its gradient back (``costmodel.step.pipeline``)."""
    d = p // stages
    return sum(2 * p2p_s(machine, s * d, (c + 1) % stages * d, boundary * micro // d, d)
               for c in range(s, stages * chunks, stages) if c + 1 < stages * chunks)


def step_s(ts: list[float], os_: list[float], m: int, chunks: int) -> float:
    return m * max(ts) + (sum(ts) - max(ts)) / chunks + max(os_)


class Unplanned(Exception):
    """A triple left without a plan, and a lower bound on its step from the devices solved
    (``lower_s``): ``why`` is ``"bound"`` where that bound reaches the step to beat (:func:`search`'s
    ``above``), ``"unresolved"`` where a device's solves found no plan fitting every moment of its
    order yet could not prove that none fits (:class:`planner.pipeline.chunks.Unresolved`)."""

    def __init__(self, lower_s: float, why: str):
        super().__init__(f"no plan of the triple ({why}); none faster than {durations.seconds(lower_s, 6)}")
        self.lower_s, self.why = lower_s, why


def search(solver: StageSolver, stack: Stack, stages: int, m: int, chunks: int, sends: list[float],
           tied, late, above: float | None = None) -> Interleaved | None:
    """The best plan of ``(S, m, V)`` (module docstring); None when a device fits nothing. ``sends``:
    each device's sends per micro-batch; ``tied(s, net)``: the tied table's once-a-step seconds a
    device's solver weighs (or None); ``late()`` raises when the search is to be left. Raises
    :class:`Unplanned` when a device is unresolved, or with ``above`` (the step to beat) once the
    devices solved so far prove the step at least that (:func:`lower_s` on their brackets, the
    others' at 0: the formula only grows with each bracket)."""
    weight = m + (stages - 1) / chunks
    sols: dict[str, StageSolution] = {}

    def partial(extra: dict[str, float]) -> float:
        brackets = {r: sol.lower_s(weight) for r, sol in sols.items()} | extra
        return lower_s([brackets[role(stages, s)] + weight * sends[s] if role(stages, s) in brackets else 0.0
                        for s in range(stages)], m, chunks)

    devices = {role(stages, s): s for s in (0, 1, stages - 1)}
    for r, s in devices.items():
        late()
        net = stack.interleaved_stage(stages, chunks, r)
        try:
            sols[r] = solver.solve(("interleaved", chunks, r), net, kept(stack, stages, s, m, chunks), tied(s, net))
        except Unresolved as e:
            raise Unplanned(partial({r: e.lower_s}), "unresolved") from None
        if sols[r] is None:
            return None
        if above is not None and len(sols) < len(devices) and (low := partial({})) >= above:
            raise Unplanned(low, "bound")
    per = tuple(sols[role(stages, s)] for s in range(stages))
    ts = [sol.micro_s + sends[s] for s, sol in enumerate(per)]
    step = step_s(ts, [sol.once_s + sol.tied_s for sol in per], m, chunks)
    lower = lower_s([sol.lower_s(weight) + weight * sends[s] for s, sol in enumerate(per)], m, chunks)
    return Interleaved(step, min(step, lower), per)


def lower_s(brackets: list[float], m: int, chunks: int) -> float:
    """No plan whose device ``s`` has ``w T_s + O_s >= brackets[s]`` (``w = m + (S - 1) / V``) steps
    faster than ``((m - 1/V) max_s L_s + (1/V) sum_s L_s) / w``: the step formula on times ``L_s / w``.

    The step is ``(m - 1/V) max_s T_s + (1/V) sum_s T_s + max_s O_s`` (module docstring). For any
    device ``r``, ``max T >= T_r``, and ``max O >= sum_s b_s O_s`` for weights ``b_s >= 0`` summing
    to 1; with ``b_r = m / w`` and ``b_s = 1 / (V w)`` for the others (``m / w + (S - 1) / (V w) =
    1``) the right side is ``(m / w) (w T_r + O_r) + sum over s != r of (1 / (V w)) (w T_s + O_s)``,
    each bracket at least its ``L``; ``r`` the device of the largest ``L`` gives the bound. It is
    never below the average ``(1/S) sum_s L_s`` (the uniform weights ``b_s = 1/S`` and ``max T >=
    mean T``), and exceeds it by ``(m - 1/V) / w`` times the busiest bracket's excess over the
    mean: the first and last device carry the embedding and the head. With ``V = 1`` it is 1F1B's
    bound for one cut (``w = m + S - 1``, :func:`planner.pipeline.cuts.cut_lower`)."""
    weight = m + (len(brackets) - 1) / chunks
    return ((m - 1 / chunks) * max(brackets) + sum(brackets) / chunks) / weight


def predict(stack: Stack, batch: int, p: int, stages: int, m: int, chunks: int, solutions: tuple[StageSolution, ...],
            machine: Machine, compute: ComputeModel, settings: Settings, step: float) -> PipelinePrediction:
    """The interleaved step of the search's choice as ``dnnplan predict`` prices it from the plan
    (``costmodel.step.pipeline.predict_pipeline``: each device's layers under its solution's strategies,
    matched by position), checked against the search's ``step`` (:func:`searched_step`)."""
    devices = iter(range(stages))

    def stage(net: Network, ranks: int, micro: int, view: Machine):
        sol = solutions[next(devices)]
        names = dict(zip((layer.name for layer in net.layers), (layer.name for layer in sol.network.layers)))
        strategies = {name: sol.strategies[own] for name, own in names.items()}
        algorithms = {name: sol.algorithms[own] for name, own in names.items() if own in sol.algorithms}
        return predict_step(net, micro, strategies, algorithms, view, compute, settings.choices.sharded_optimizer,
                            overlap=settings.overlap)

    pred = predict_pipeline(stack.network, batch, p, stages, m, INTERLEAVED, machine, stage, chunks=chunks)
    searched = searched_step(pred)
    if abs(searched - step) > 1e-9 * step:
        raise PlanMismatch(f"the interleaved step {searched!r} s differs from the search's {step!r} s")
    for s, st in enumerate(pred.stages):
        check_memory(solutions[s], st, hold(stack, stages, s, m, chunks))
    return pred


def check_memory(sol: StageSolution, st: StagePrediction, device: ChunkHold) -> None:
    """Raise :class:`PlanMismatch` unless the device's memory as its solve counts it (each chunk's
    micro-batches in flight at its busiest moment) is predict's count for it (its layers' memory of
    one micro-batch and what the order holds beyond it)."""
    counted = sol.held_bytes(device)
    priced = st.micro.memory_bound_bytes + st.micro.activation_bytes * (st.kept_micro_batches - 1)
    if abs(priced - counted) > 1e-9 * max(abs(counted), 1.0):
        raise PlanMismatch(f"device {st.index}: predicted memory count {priced!r} B differs from its solve's "
                           f"{counted!r} B")


def own_layers(stack: Stack, stages: int, chunks: int, s: int) -> dict[str, str]:
    """Device ``s``'s canonical layer names (:meth:`planner.pipeline.stack.Stack.interleaved_stage`) -> its own."""
    canonical = stack.interleaved_stage(stages, chunks, role(stages, s)).layers
    return dict(zip((layer.name for layer in canonical),
                    (layer.name for layer in stack.device_layers(stages, chunks, s))))


def chunk_firsts(stack: Stack, stages: int, chunks: int) -> tuple[str, ...]:
    """Each of the ``S V`` chunks' first layer, in network order (what a plan file's pipeline lists)."""
    c = stack.n // (stages * chunks)
    firsts = [stack.blocks[i * c][0].name for i in range(stages * chunks)]
    firsts[0] = stack.network.layers[0].name
    return tuple(firsts)


def searched_step(pred: PipelinePrediction) -> float:
    """``pred``'s step as the pipeline search weighs it: without the expert all-to-alls that
    ``+experts`` leaves alone in the schedule's warm-up and cool-down (``StagePrediction.unpaired_s``),
    which the plan's step adds as ``dnnplan predict`` does (docs/planner.md, "Known limits")."""
    return dataclasses.replace(pred, stages=tuple(dataclasses.replace(st, unpaired_s=0.0)
                                                  for st in pred.stages)).step_s
