"""Predicted against measured, per layer and phase, and for the whole step (pure).

The prediction is :func:`costmodel.step.prediction.predict_step` for the plan's strategies and algorithms
with the compute model the plan was made with; its terms map onto the runtime's phases as
:mod:`executor.runtime.timers` states::

    fwd_compute = fwd_compute_s          fwd_comm = fwd_comm_s + reshard_fwd_s
    bwd_compute = bwd_data_s + bwd_weights_s
    bwd_comm    = bwd_comm_s + reshard_bwd_s
    grad_sync   = grad_sync_s            update   = update_s

Relative error is signed, ``(measured - predicted) / predicted``: positive means the run was
slower than predicted. It is ``None`` where the prediction is zero (nothing to compare against).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from costmodel.step.prediction import StepPrediction
from executor.runtime.timers import PHASES, WORK_PHASES


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per phase for one layer (measured: median over timed steps of the max over ranks)."""

    name: str
    phases: dict  # phase -> seconds

    @property
    def total_s(self) -> float:
        return sum(self.phases.get(ph, 0.0) for ph in WORK_PHASES)  # waiting is shown apart


@dataclass(frozen=True)
class Measured:
    """What a run measured (see :mod:`executor.report.collect`)."""

    ranks: int
    steps: int
    step_s: float  # median over timed steps of the slowest rank's step
    step_min_s: float
    step_max_s: float
    layers: tuple[LayerTimes, ...]
    peak_bytes: int | None = None  # the largest rank's peak of the arrays it held in a step (executor.backend.host_memory)


@dataclass(frozen=True)
class LayerError:
    name: str
    phases: dict  # phase -> relative error or None
    total: float | None


@dataclass(frozen=True)
class Comparison:
    predicted_step_s: float
    measured: Measured
    predicted: tuple[LayerTimes, ...]
    errors: tuple[LayerError, ...]
    step_rel: float | None
    predicted_peak_bytes: int | None = None  # the prediction's memory peak per device
    stages: tuple = ()  # a pipelined plan's stages (executor.report.pipeline.StageRow)
    predicted_wait_s: float = 0.0  # the ranks' wait for each other (StepPrediction.wait_s)
    predicted_collective_code_s: float = 0.0  # the executor's code around collectives (StepPrediction)

    @property
    def memory_rel(self) -> float | None:
        """Measured peak memory against predicted, minus 1 (None when either is missing)."""
        if self.predicted_peak_bytes is None or self.measured.peak_bytes is None:
            return None
        return rel_error(self.measured.peak_bytes, self.predicted_peak_bytes)

    @property
    def predicted_outside_s(self) -> float:
        """The predicted step less its layers' phases and the ranks' wait: the executor's own time
        between them (``StepPrediction.dispatch_s``, and its code around each collective,
        ``StepPrediction.collective_code_s``), which no layer's span measures."""
        return max(self.predicted_step_s - self.predicted_wait_s - sum(lt.total_s for lt in self.predicted), 0.0)

    @property
    def layer_median_abs_rel(self) -> float | None:
        """Median over layers of |relative error| of the layer's total (layers predicted above zero)."""
        vals = [abs(e.total) for e in self.errors if e.total is not None]
        return statistics.median(vals) if vals else None


def rel_error(measured: float, predicted: float) -> float | None:
    """``(measured - predicted) / predicted``; None when nothing was predicted."""
    if predicted <= 0.0:
        return None
    return (measured - predicted) / predicted


def predicted_layers(pred: StepPrediction) -> tuple[LayerTimes, ...]:
    """The prediction split into the runtime's phases, layer by layer."""
    out = []
    for row in pred.layers:
        est = row.layer
        out.append(LayerTimes(est.name, {
            "fwd_compute": est.fwd_compute_s,
            "fwd_comm": est.fwd_comm_s + row.reshard_fwd_s,
            "bwd_compute": est.bwd_compute_s,
            "bwd_comm": est.bwd_comm_s + row.reshard_bwd_s,
            "grad_sync": est.grad_sync_s,
            "update": est.update_s,
            "wait": 0.0,
        }))
    return tuple(out)


def compare(predicted: tuple[LayerTimes, ...], predicted_step_s: float, measured: Measured) -> Comparison:
    """Relative errors per layer and phase and for the step.

    Layers are listed in the prediction's (network) order; a layer the run did not time counts as
    measured zero.
    """
    by_name = {lt.name: lt for lt in measured.layers}
    errors = []
    for p in predicted:
        m = by_name.get(p.name, LayerTimes(p.name, {}))
        errors.append(LayerError(
            p.name,
            {ph: rel_error(m.phases.get(ph, 0.0), p.phases.get(ph, 0.0)) for ph in PHASES},
            rel_error(m.total_s, p.total_s)))
    ordered = tuple(by_name.get(p.name, LayerTimes(p.name, {ph: 0.0 for ph in PHASES})) for p in predicted)
    measured = Measured(measured.ranks, measured.steps, measured.step_s, measured.step_min_s,
                        measured.step_max_s, ordered, measured.peak_bytes)
    return Comparison(predicted_step_s, measured, predicted, tuple(errors),
                      rel_error(measured.step_s, predicted_step_s))


def compare_prediction(pred: StepPrediction, measured: Measured) -> Comparison:
    return replace(compare(predicted_layers(pred), pred.step_s, measured),
                   predicted_peak_bytes=int(pred.memory_peak_bytes), predicted_wait_s=pred.wait_s,
                   predicted_collective_code_s=pred.collective_code_s)


def _layer_json(lt: LayerTimes) -> dict:
    return {"name": lt.name, **{f"{ph}_s": lt.phases.get(ph, 0.0) for ph in PHASES}, "total_s": lt.total_s}


def comparison_json(plan_path: str, cmp: Comparison, check) -> dict:
    """The ``dnnplan execute --json`` object (docs/executor.md), exactly these keys."""
    return {
        "plan": plan_path,
        "ranks": cmp.measured.ranks,
        "steps": cmp.measured.steps,
        "measured": {"step_s": cmp.measured.step_s, "layers": [_layer_json(lt) for lt in cmp.measured.layers]},
        "predicted": {"step_s": cmp.predicted_step_s, "wait_s": cmp.predicted_wait_s,
                      "collective_code_s": cmp.predicted_collective_code_s,
                      "layers": [_layer_json(lt) for lt in cmp.predicted]},
        "error": {"step_rel": cmp.step_rel,
                  "layers": [{"name": e.name, **e.phases, "total": e.total} for e in cmp.errors]},
        "check": None if check is None else {"passed": bool(check.passed),
                                             "worst_rel_error": float(check.worst_rel_error),
                                             "worst_tensor": str(check.worst_tensor)},
        "predicted_peak_bytes": cmp.predicted_peak_bytes,
        "measured_peak_bytes": cmp.measured.peak_bytes,
        "memory_rel": cmp.memory_rel,
        **({"stages": [row.as_dict() for row in cmp.stages]} if cmp.stages else {}),
    }
