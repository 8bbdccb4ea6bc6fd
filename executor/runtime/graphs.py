"""Whether a run's timed steps are replayed as a CUDA graph, and why not.

On a device that records and replays a stream's work (executor.backend.device.StepGraphs), the
runtime runs the warm-up steps eagerly (the engines chosen, workspaces and tables made), then
records one whole step (forward, backward, the collectives, the update) without doing it, and
replays that record for each timed step, timed with one pair of marks; the per-layer times come
from the eager attribution step after them (executor.runtime.run). ``dnnplan execute`` replays by
default where the plan allows it (``--graphs``), runs eagerly with ``--no-graphs``, and the report
says which mode ran and, when eager, why. A graph replays exactly the work it recorded, so a step
in which the host decides anew or waits for the device runs eagerly (:func:`graph_refusal`). A
capture the device refuses (:class:`CaptureFailed`) ends a run that asked for graphs
(``--graphs``); by default the timed steps then run eagerly, and the report says why
(:func:`fell_back`).
"""

from __future__ import annotations

from dataclasses import dataclass

from executor.backend.device import Backend, StepGraphs
from networks.errors import DnnplanError
from networks.ir import Network
from planner.plan.plan import Plan

EAGER, GRAPHS = "eager", "graphs"
#: ops a captured step cannot replay, and why (each reason a line the report prints)
#: (dropout runs captured: its seed moves with a step counter in device memory that each replay
#: advances, kernels.cuda.elementwise)
OPS_REFUSED = {
    "moe": "mixture-of-experts routing sizes its all-to-all from token counts read on the host each step",
}


class CaptureFailed(DnnplanError):
    """The device refused to capture the step: a call inside it the capture cannot hold."""


def fell_back(err: CaptureFailed) -> "StepMode":
    """The mode of timed steps run eagerly after the default's capture failed, saying why."""
    return StepMode(EAGER, f"{err.bare}; the timed steps ran eagerly")


@dataclass(frozen=True)
class StepMode:
    """How the timed steps ran: ``graphs`` (each a replay of one captured step) or ``eager``,
    with ``reason`` when graphs were possible to ask for but did not run."""

    mode: str
    reason: str | None = None

    def as_json(self) -> dict:
        return {"mode": self.mode, "reason": self.reason}


def step_mode(plan: Plan, net: Network, backend: Backend, steps: int, warmup: int,
              asked: bool | None) -> StepMode:
    """The mode the timed steps run in: ``asked`` True (``--graphs``), False (``--no-graphs``) or
    None (graphs where the plan and device allow them, else eager without a word on the host)."""
    if asked is False:
        return StepMode(EAGER, "--no-graphs")
    if not isinstance(backend, StepGraphs):
        return StepMode(EAGER, "the host runs no CUDA graphs" if asked else None)
    refusal = graph_refusal(plan, net, backend, steps, warmup)
    return StepMode(EAGER, refusal) if refusal else StepMode(GRAPHS)


def graph_refusal(plan: Plan, net: Network, backend: StepGraphs, steps: int, warmup: int) -> str | None:
    """Why the plan's step cannot be captured on ``backend`` (the first reason), None when it can."""
    if (why := backend.graph_refusal()) is not None:
        return why
    if plan.pipeline is not None:
        return "pipeline stages pass activations over MPI point-to-point, which a CUDA graph cannot capture"
    for layer in net.layers:
        if layer.op in OPS_REFUSED:
            return f"layer {layer.name}: {OPS_REFUSED[layer.op]}"
    if warmup < 1:
        return "a step is captured after an eager warm-up step, and --warmup 0 leaves none"
    if steps < 1:
        return "no timed step to replay"
    return None
