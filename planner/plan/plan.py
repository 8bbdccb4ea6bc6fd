"""The plan: network + batch + devices + machine + one strategy and algorithm per layer, with the
prediction that came with it. :mod:`planner.plan.plan_file` reads and writes it as YAML or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.choices.training import TrainingChoices
from costmodel.parallel.strategy import Strategy

PLAN_VERSION = 1


@dataclass(frozen=True)
class LayerPlan:
    name: str
    strategy: Strategy
    algorithm: str = ""  # convolution algorithm ("" for other ops)
    fwd_s: float = 0.0  # predicted forward compute
    bwd_s: float = 0.0  # predicted backward compute
    comm_s: float = 0.0  # predicted collectives and reshards
    memory_bytes: int = 0
    #: A convolution's algorithms under its strategy, each (algorithm, fwd + bwd compute seconds,
    #: workspace bytes), as the planner weighed them; () for other layers and for plans read back
    alternatives: tuple[tuple[str, float, int], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Baseline:
    name: str  # e.g. "data", "best uniform (N=8,F=2)"
    step_s: float
    memory_peak_bytes: int
    fits: bool = True  # within the plan's memory limit (planner.problem.baselines): else never shown as a speed-up


@dataclass(frozen=True)
class PipelineSpec:
    """A pipelined plan's stages (costmodel.step.pipeline): stage ``s`` runs the layers from
    ``first_layers[s]`` up to the next stage's first on ranks ``[s d, (s + 1) d)``, ``d = devices /
    stages``, its layers' strategies over those ``d`` ranks at micro-batches of ``batch /
    micro_batches`` samples, in the given schedule."""

    stages: int
    micro_batches: int
    schedule: str  # costmodel.step.pipeline.SCHEDULES, or INTERLEAVED
    first_layers: tuple[str, ...]  # interleaved: each of the stages x chunks chunks' first layer
    chunks: int = 1  # interleaved 1F1B: model chunks a device (chunk c on device c mod stages)


@dataclass(frozen=True)
class Plan:
    network: str  # the zoo name or the spec path the plan was made from
    network_name: str
    network_hash: str
    batch: int
    devices: int
    machine: str
    layers: tuple[LayerPlan, ...]
    step_s: float = 0.0
    memory_peak_bytes: int = 0
    profile_fingerprint: str | None = None
    baselines: tuple[Baseline, ...] = ()
    solver: dict = field(default_factory=dict, compare=False, hash=False)
    version: int = PLAN_VERSION
    #: how it trains (costmodel.choices.training): what a plan file records of the choices; the
    #: network hash is of the network stored and marked as they train it
    choices: TrainingChoices = TrainingChoices()
    mfu: float = 0.0  # model FLOP utilisation of the predicted step (costmodel.step.prediction.model_flops_utilization)
    #: the peak per device by what holds it (StepPrediction.memory_parts), shown, not read back
    memory_parts: dict = field(default_factory=dict, compare=False, hash=False)
    pipeline: PipelineSpec | None = None  # None: one stage on every device, the whole batch at once
    #: the step by term (costmodel.step.breakdown: the names every command prints), shown, not read back
    breakdown: tuple[tuple[str, float], ...] = field(default=(), compare=False, hash=False)
    #: the collectives' time exposed and overlapped with compute (costmodel.step.breakdown.comm_parts), shown only
    comm: tuple[tuple[str, float], ...] = field(default=(), compare=False, hash=False)

    @property
    def stage_ranks(self) -> int:
        """The ranks each layer's strategy spans: all devices, or one pipeline stage's."""
        return self.devices // self.pipeline.stages if self.pipeline else self.devices

    @property
    def micro_batch(self) -> int:
        """The samples each layer's strategy splits: the batch, or one micro-batch."""
        return self.batch // self.pipeline.micro_batches if self.pipeline else self.batch

    @property
    def memory_allocated_bytes(self) -> int:
        """The tensors' peak: ``memory_peak_bytes`` (reserved, as the framework holds it) less the
        framework's part (StepPrediction.memory_allocated_bytes)."""
        return self.memory_peak_bytes - int(self.memory_parts.get("framework", 0))

    def strategies(self) -> dict[str, Strategy]:
        return {lp.name: lp.strategy for lp in self.layers}

    def algorithms(self) -> dict[str, str]:
        return {lp.name: lp.algorithm for lp in self.layers if lp.algorithm}
