"""A step split into named terms: the one breakdown `plan`, `predict` and `execute` print (pure).

Every command names the parts of a step alike, so a plan's step, the same plan predicted again
and the same plan measured can be read side by side:

- ``forward``: every layer's forward compute, its forward collectives and the reshards into it;
- ``backward``: every layer's backward compute, its backward collectives and the reshards of the
  gradients going back;
- ``gradient sync``: the weight-gradient collectives (allreduce; with ZeRO its reduce-scatter and
  gathers), after the backward pass;
- ``update``: the optimiser's update of every weight;
- where the executor's prediction adds them: ``between kernels`` (its own time per layer pass),
  ``waiting for the slowest rank`` and ``code around collectives``; where a framework's host or
  launches hold the device back, ``host and launches`` (costmodel.frameworks.host_calls); where
  ``--overlap ...+experts`` hides the expert all-to-alls under another micro-batch's pass,
  ``expert all-to-alls alone``: those of the passes no other pass runs beside (the first forward
  and the last backward; in a pipeline, the warm-up and cool-down passes);
- for a pipelined step, the forward and backward of the slowest stage times the micro-batches,
  its ``pipeline sends``, the ``bubble`` (fill and drain) and the gradient sync and update of the
  stage that takes longest for them (``costmodel.step.pipeline``).

The terms sum to the step (``StepPrediction.step_s``, ``PipelinePrediction.step_s``). Apart from
them, the communication's time in two parts (:func:`comm_parts`): ``exposed`` (inside the terms
above: what the step waits for) and ``overlapped`` (hidden under compute, costmodel.comm.overlap; not
in the step); they sum to the collectives' link time and, in a pipeline, the slowest stage's sends
and the tied embedding's gradient sync between the first and the last stage (a pipeline's line is
its slowest stage's, as its terms are: the other stages' collectives and sends run beside it).
"""

from __future__ import annotations

from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction

#: the terms in the order they are printed (name, StepPrediction attribute)
TERMS = (("forward", "fwd_s"), ("backward", "bwd_s"), ("gradient sync", "sync_s"), ("update", "update_s"),
         ("between kernels", "dispatch_s"), ("waiting for the slowest rank", "wait_s"),
         ("code around collectives", "collective_code_s"), ("host and launches", "host_s"),
         ("expert all-to-alls alone", "unpaired_expert_s"))
#: the terms every breakdown shows, even at zero
CORE = ("forward", "backward", "gradient sync", "update")


def step_terms(pred: StepPrediction) -> tuple[tuple[str, float], ...]:
    """A one-stage step's terms (module docstring): the four core terms, and the others that are not 0."""
    return tuple((name, float(getattr(pred, attr))) for name, attr in TERMS
                 if name in CORE or getattr(pred, attr) > 0)


def pipeline_terms(pred: PipelinePrediction) -> tuple[tuple[str, float], ...]:
    """A pipelined step's terms (module docstring)."""
    slowest = max(pred.stages, key=lambda s: s.per_micro_s)
    once = max(pred.stages, key=lambda s: s.once_s)
    m = pred.micro_batches
    out = [("forward", m * slowest.micro.fwd_s), ("backward", m * slowest.micro.bwd_s),
           ("between kernels", m * slowest.micro.dispatch_s), ("pipeline sends", m * slowest.p2p_s),
           ("bubble", pred.bubble_s), ("gradient sync", once.micro.sync_s + once.tied_sync_s),
           ("update", once.micro.update_s), ("expert all-to-alls alone", once.unpaired_s)]
    return tuple((name, secs) for name, secs in out if name in CORE or secs > 0)


def measured_terms(phases: dict[str, float], step_s: float) -> tuple[tuple[str, float], ...]:
    """A measured step's terms from the executor's phases (``executor.timers.PHASES``, summed over
    layers): the same names, and what the timed phases leave of the step."""
    fwd = phases.get("fwd_compute", 0.0) + phases.get("fwd_comm", 0.0)
    bwd = phases.get("bwd_compute", 0.0) + phases.get("bwd_comm", 0.0)
    out = [("forward", fwd), ("backward", bwd), ("gradient sync", phases.get("grad_sync", 0.0)),
           ("update", phases.get("update", 0.0)), ("waiting for the slowest rank", phases.get("wait", 0.0))]
    rest = step_s - sum(secs for _, secs in out)
    out.append(("outside the timed layers", max(rest, 0.0)))
    return tuple((name, secs) for name, secs in out if name in CORE or secs > 0)


def comm_parts(pred: StepPrediction | PipelinePrediction) -> tuple[tuple[str, float], ...]:
    """The step's communication as (``exposed``, seconds in the terms) and (``overlapped``, seconds
    hidden under compute); of a pipelined step, the slowest stage's collectives and sends per
    micro-batch times the micro-batches and the once-a-step stage's gradient sync (its tied
    embedding's too), as :func:`pipeline_terms` takes them."""
    if isinstance(pred, StepPrediction):
        return ("exposed", pred.comm_exposed_s), ("overlapped", pred.comm_overlapped_s)
    slowest_stage = max(pred.stages, key=lambda s: s.per_micro_s)
    slowest = slowest_stage.micro
    once_stage = max(pred.stages, key=lambda s: s.once_s)
    once, alone = once_stage.micro, once_stage.unpaired_s  # alone: the expert all-to-alls no pass hides
    m = pred.micro_batches

    def total(step: StepPrediction, sync: bool, time) -> float:
        return sum(time(c) for x in step.layers for c in x.layer.comms if (c.phase == "sync") == sync)

    exposed = (m * (total(slowest, False, lambda c: c.seconds) + slowest_stage.p2p_s)
               + total(once, True, lambda c: c.seconds) + once_stage.tied_sync_s + alone)
    hidden = (m * total(slowest, False, lambda c: c.link_time - c.seconds)
              + total(once, True, lambda c: c.link_time - c.seconds) - alone)
    return ("exposed", exposed), ("overlapped", hidden)
