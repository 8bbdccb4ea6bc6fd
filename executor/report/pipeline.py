"""A pipelined run against its prediction: per layer as for any plan, and per stage its busy time
and its idle time, the bubble among it (pure).

Predicted (costmodel.step.pipeline): a layer's forward and backward phases ``m`` times its stage's
micro-batch prediction, its gradient sync and update once; stage ``s`` is busy ``m T_s + O_s`` and
idle the rest of the step, ``step - m T_s - O_s``; the bubble is the idle time of the slowest
stage, ``sum_s T_s - max_s T_s`` when the stages' once-a-step work is equal.

Measured (executor.runtime.pipeline): for each timed step, a rank's busy time is its wall time less
its waits (receives from other stages, and the barrier before each collective); a stage's is the
largest of its ranks', and its idle time the step's (the slowest rank's wall time) less that. Each
is the median over the timed steps; the measured bubble is the smallest stage idle time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from costmodel.step.pipeline import PipelinePrediction
from executor.report.collect import RankTimes, timed_steps
from executor.report.compare import Comparison, LayerTimes, Measured, compare, predicted_layers, rel_error

ONCE = ("grad_sync", "update")


@dataclass(frozen=True)
class StageRow:
    stage: int
    first_layer: str
    last_layer: str
    ranks: tuple[int, ...]
    predicted_busy_s: float
    measured_busy_s: float
    predicted_idle_s: float
    measured_idle_s: float

    @property
    def busy_rel(self) -> float | None:
        return rel_error(self.measured_busy_s, self.predicted_busy_s)

    def as_dict(self) -> dict:
        return {"stage": self.stage, "first_layer": self.first_layer, "last_layer": self.last_layer,
                "ranks": list(self.ranks), "predicted_busy_s": self.predicted_busy_s,
                "measured_busy_s": self.measured_busy_s, "busy_rel": self.busy_rel,
                "predicted_idle_s": self.predicted_idle_s, "measured_idle_s": self.measured_idle_s}


def pipeline_layers(pred: PipelinePrediction) -> tuple[LayerTimes, ...]:
    """Every layer's predicted phases over one step: ``m`` micro-batches, one sync and update."""
    m, out = pred.micro_batches, []
    for stage in pred.stages:
        for lt in predicted_layers(stage.micro):
            out.append(LayerTimes(lt.name, {ph: v if ph in ONCE else m * v for ph, v in lt.phases.items()}))
    return tuple(out)


def stage_rows(pred: PipelinePrediction, ranks: list[RankTimes], steps: int) -> tuple[StageRow, ...]:
    """Each stage's busy and idle time, predicted and measured (module docstring)."""
    timed = timed_steps(ranks, steps)
    walls = {t: max(r.step_wall[t] for r in ranks) for t in timed}
    d = pred.devices // len(pred.stages)
    rows = []
    for st in pred.stages:
        own = [r for r in ranks if r.rank // d == st.index]
        busy = [max(r.step_wall[t] - _waits(r, t) for r in own) for t in timed]
        idle = [walls[t] - b for t, b in zip(timed, busy)]
        predicted = pred.micro_batches * st.per_micro_s + st.once_s
        rows.append(StageRow(st.index, st.layers[0], st.layers[1], tuple(r.rank for r in own), predicted,
                             statistics.median(busy), pred.step_s - predicted, statistics.median(idle)))
    return tuple(rows)


def _waits(r: RankTimes, step: int) -> float:
    return sum(v for (s, _, ph), v in r.totals.items() if s == step and ph == "wait")


def bubble(rows: tuple[StageRow, ...]) -> tuple[float, float]:
    """(predicted, measured) bubble: the smallest stage idle time of each."""
    return min(r.predicted_idle_s for r in rows), min(r.measured_idle_s for r in rows)


def compare_pipeline(pred: PipelinePrediction, measured: Measured, ranks: list[RankTimes] | None) -> Comparison:
    """The run against the pipelined prediction, per layer and (given every rank's times) per stage."""
    cmp = compare(pipeline_layers(pred), pred.step_s, measured)
    rows = stage_rows(pred, ranks, measured.steps) if ranks else ()
    return replace(cmp, predicted_peak_bytes=int(pred.memory_peak_bytes), stages=rows)
