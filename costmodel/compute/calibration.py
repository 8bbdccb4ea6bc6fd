"""Fitting a datasheet machine's efficiencies to measured training steps (pure).

The roofline prices every kernel as ``max(flops / (peak x e_class), bytes / (bandwidth x e_memory))``
(:class:`costmodel.compute.roofline.Roofline`), with one efficiency per kernel class
(:data:`costmodel.machine.model.EFFICIENCY_CLASSES`). A step's prediction is therefore a constant (its
collectives) plus a sum of such terms. :func:`step_terms` records those terms once for a
configuration; :func:`step_s` re-prices them for any efficiencies without predicting again, and
:func:`fit_efficiencies` finds the efficiencies that best explain a set of measured steps (least
squares of the log error, coordinate descent on a grid: no efficiency above 1, so nothing is ever
priced below physics). bench/published/bench_published.py fits the shipped machines this way on half of the
published measurements at most and reports the error on the rest (docs/VALIDATION.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Sequence

import numpy as np

from costmodel.compute.roofline import Roofline
from costmodel.machine.model import EFFICIENCY_CLASSES, Machine

#: The grid each efficiency is searched on (fractions of the datasheet figure)
GRID = np.round(np.arange(0.02, 1.0001, 0.01), 2)


@dataclass(frozen=True)
class RecordingRoofline(Roofline):
    """A :class:`Roofline` that notes every kernel it prices: (flops, bytes, peak FLOP/s, class).
    ``notes_every_call`` asks costmodel.step.prediction to price repeated layers again rather than
    reuse the first one's estimate, so that each kernel run is one noted call."""

    notes_every_call: ClassVar[bool] = True
    calls: list = field(default_factory=list, compare=False, hash=False)

    def _time(self, flops: float, nbytes: float, peak_key: str = "float32", kind: str = "cuda_cores") -> float:
        self.calls.append((float(flops), float(nbytes), float(self.peak(peak_key)), kind))
        return super()._time(flops, nbytes, peak_key, kind)


@dataclass(frozen=True)
class StepTerms:
    """One configuration's step as priced terms: ``rest_s`` (collectives: no kernel efficiency in
    them) plus, per kernel, ``max(flops / (peak x e[kind]), bytes / (bandwidth x e_memory))``."""

    rest_s: float
    flops: np.ndarray
    nbytes: np.ndarray
    peak: np.ndarray
    kind: np.ndarray  # index into EFFICIENCY_CLASSES
    bandwidth: float


def step_terms(machine: Machine, predict: Callable[[Roofline], float], tf32: bool = False) -> StepTerms:
    """The terms of ``predict(compute_model)`` (a predicted step in seconds) on ``machine``."""
    model = RecordingRoofline(machine, tf32=tf32)
    total = predict(model)
    return _terms(machine, model.calls, total)


@dataclass(frozen=True)
class PipelineTerms:
    """A pipelined step (costmodel.step.pipeline) as priced terms: per stage, the terms of one
    micro-batch (``micro``: forward, backward, sends) and of the once-a-step part (``once``: gradient
    sync and update), combined as the pipeline combines them,
    ``m max_s T_s + (sum_s T_s - max_s T_s) / V + max_s once_s`` (``V`` model chunks a device)."""

    micro: tuple[StepTerms, ...]
    once: tuple[StepTerms, ...]
    micro_batches: int
    chunks: int = 1

    @property
    def kind(self) -> np.ndarray:
        return np.concatenate([t.kind for t in self.micro + self.once])


@dataclass(frozen=True)
class StageRecorder(RecordingRoofline):
    """A :class:`RecordingRoofline` that keeps the kernels of the optimiser update
    (:meth:`Roofline.update_s`, once a step) apart from the rest (every micro-batch)."""

    once_calls: list = field(default_factory=list, compare=False, hash=False)

    def update_s(self, weight_elems: int, itemsize: int, slots: int = 1) -> float:
        start = len(self.calls)
        out = super().update_s(weight_elems, itemsize, slots)
        self.once_calls.extend(self.calls[start:])
        del self.calls[start:]
        return out


def stage_compute(machine: Machine, recorders: list | None):
    """The compute model a pipeline stage is priced on: the roofline, or, when the caller collects
    terms (``recorders``, a list), a :class:`StageRecorder` appended to it."""
    if recorders is None:
        return Roofline(machine)
    recorders.append(StageRecorder(machine))
    return recorders[-1]


def pipeline_terms(machine: Machine, stages: Sequence[tuple[StageRecorder, float, float]], micro_batches: int,
                   chunks: int = 1) -> PipelineTerms:
    """The terms of a pipelined step from each stage's recorder (which priced that stage alone),
    its predicted seconds per micro-batch (T_s) and once a step (sync and update)."""
    return PipelineTerms(tuple(_terms(machine, r.calls, t) for r, t, _ in stages),
                         tuple(_terms(machine, r.once_calls, t) for r, _, t in stages), micro_batches, chunks)


def _terms(machine: Machine, calls: list, total: float) -> StepTerms:
    flops = np.array([c[0] for c in calls], dtype=float)
    nbytes = np.array([c[1] for c in calls], dtype=float)
    peak = np.array([c[2] for c in calls], dtype=float)
    kind = np.array([EFFICIENCY_CLASSES.index(c[3]) for c in calls], dtype=np.int64)
    bandwidth = machine.device.mem_bandwidth_bytes_per_s
    effs = np.array([machine.device.efficiency_of(k) for k in EFFICIENCY_CLASSES])
    kernels = _kernels_s(flops, nbytes, peak, kind, bandwidth, effs)
    return StepTerms(total - float(kernels.sum()), flops, nbytes, peak, kind, bandwidth)


def _kernels_s(flops, nbytes, peak, kind, bandwidth, effs) -> np.ndarray:
    memory = effs[EFFICIENCY_CLASSES.index("memory")]
    return np.maximum(flops / (peak * effs[kind]), nbytes / (bandwidth * memory))


def step_s(terms: StepTerms | PipelineTerms, efficiencies: dict[str, float]) -> float:
    """The step of ``terms`` priced with ``efficiencies`` (one per :data:`EFFICIENCY_CLASSES`)."""
    if isinstance(terms, PipelineTerms):
        t = [step_s(x, efficiencies) for x in terms.micro]
        return (terms.micro_batches * max(t) + (sum(t) - max(t)) / terms.chunks
                + max(step_s(x, efficiencies) for x in terms.once))
    effs = np.array([efficiencies[k] for k in EFFICIENCY_CLASSES])
    return terms.rest_s + float(_kernels_s(terms.flops, terms.nbytes, terms.peak, terms.kind, terms.bandwidth,
                                           effs).sum())


def squared_log_error(rows: Sequence[tuple[StepTerms | PipelineTerms, float]], efficiencies: dict[str, float]) -> float:
    """Mean over ``(terms, measured step seconds)`` of log(predicted / measured) squared."""
    return float(np.mean([np.log(step_s(t, efficiencies) / measured) ** 2 for t, measured in rows]))


def fit_efficiencies(rows: Sequence[tuple[StepTerms | PipelineTerms, float]], start: dict[str, float] | None = None,
                     rounds: int = 20, classes: Sequence[str] = EFFICIENCY_CLASSES) -> dict[str, float]:
    """The efficiencies on :data:`GRID` that minimise :func:`squared_log_error` over ``rows``,
    by coordinate descent from ``start`` (ties: the larger efficiency, the more conservative
    claim of what kernels lose). A class no row exercises, or not in ``classes``, keeps its start value."""
    best = dict(start or {k: 0.6 for k in EFFICIENCY_CLASSES})
    used = ({EFFICIENCY_CLASSES[i] for t, _ in rows for i in np.unique(t.kind)} | {"memory"}) & set(classes)
    for _ in range(rounds):
        before = dict(best)
        for kind in EFFICIENCY_CLASSES:
            if kind not in used:
                continue
            errors = [squared_log_error(rows, {**best, kind: float(g)}) for g in GRID]
            low = min(errors)
            best[kind] = float(max(g for g, e in zip(GRID, errors) if e <= low + 1e-12))
        if best == before:
            break
    return best


def with_efficiencies(machine: Machine, efficiencies: dict[str, float]) -> Machine:
    """``machine`` with its device's per-class efficiencies replaced."""
    device = dataclasses.replace(machine.device, efficiency=min(efficiencies.values()),
                                 efficiencies=dict(efficiencies))
    return dataclasses.replace(machine, device=device)
