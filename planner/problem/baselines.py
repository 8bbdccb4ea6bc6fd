"""The plans a user would otherwise pick, priced on the planner's own cost model (pure).

Pure data parallelism and the best single uniform strategy, each with its fastest convolution
algorithms. Each is marked whether it fits the plan's memory limit by the planner's own measure
(``StepPrediction.memory_bound_bytes``, what the solver holds under the limit): a baseline over
the limit is never shown as a speed-up, and one that fits and is faster than the search's plan
becomes the plan (:func:`planner.problem.solve.make_plan`), so "this plan" is never slower than a
baseline listed beside it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.layer.candidates import algorithms
from costmodel.compute.model import ComputeModel
from costmodel.layer.cost import layer_estimate
from costmodel.machine.model import Machine
from costmodel.choices.optimizer import Optimizer
from costmodel.step.prediction import StepPrediction, predict_step
from costmodel.parallel.strategy import Strategy
from costmodel.frameworks.uniform import NAMED, uniform_strategies
from networks.ir import Network
from planner.problem.build import Built, signature
from planner.plan.plan import Baseline
from planner.solvers import evaluate

#: a plan's memory may exceed the limit by this fraction of it and still fit (the solver's rounding)
FIT_RTOL = 1e-9
#: the name of the pure data-parallel baseline (its row beside a plan, and a sweep's data columns)
DATA_PARALLEL = "data parallel"


@dataclass(frozen=True)
class PricedBaseline:
    """A baseline's name, its prediction and whether it fits the memory limit."""

    name: str
    prediction: StepPrediction
    fits: bool

    def row(self) -> Baseline:
        return Baseline(self.name, self.prediction.step_s, int(self.prediction.memory_peak_bytes), self.fits)


def fastest_algorithms(net: Network, strategies: dict[str, Strategy], batch: int, machine: Machine,
                       compute: ComputeModel, optimizer: Optimizer | str = "momentum") -> dict[str, str]:
    """For each convolution the algorithm with the shortest estimate under its strategy."""
    out = {}
    for layer in net.layers:
        algos = algorithms(layer)
        if layer.op != "conv2d":
            continue
        out[layer.name] = min(algos, key=lambda a: (layer_estimate(layer, strategies[layer.name], batch, machine,
                                                                     compute, a, optimizer).total_s,
                                                    algos.index(a)))
    return out


def baselines(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
              built: Built | None = None, optimizer: Optimizer | str = "momentum",
              limit: float | None = None, overlap: str | None = None) -> list[PricedBaseline]:
    """Pure data parallel and the best single uniform strategy, each with its fastest algorithms,
    and whether each fits ``limit`` bytes a device (None: the machine's memory).

    Uniform specs tried: data, filter, channel, spatial (predicted directly), and every strategy that
    is a candidate of some layer, applied to all layers (a layer that cannot take it runs data
    parallel); those are priced on the built problem's own matrices, then the best is predicted.
    The best is the fastest that fits when any fits.
    """
    limit = float(machine.device.mem_capacity_bytes if limit is None else limit)
    priced: list[tuple[float, float, str, dict[str, Strategy]]] = []  # (step, memory bound, spec, strategies)
    groups = _Groups(net)
    predicted: dict[str, StepPrediction] = {}  # the named specs' predictions, not made twice
    for spec in NAMED:
        strategies = uniform(net, p, batch, spec, groups)
        pred = predicted[spec] = predict_step(net, batch, strategies, fastest_algorithms(
            net, strategies, batch, machine, compute, optimizer), machine, compute, optimizer, overlap=overlap)
        priced.append((pred.step_s, pred.memory_bound_bytes, spec, strategies))
    if built is not None:
        priced += _candidate_uniforms(net, batch, p, built, groups)
    data = next(x for x in priced if x[2] == "data")
    fitting = [x for x in priced if _fits(x[1], limit)]
    best = data if _fits(data[1], limit) or not fitting else fitting[0]
    for x in fitting or priced:  # a strict improvement (rounding ties keep the simpler spec)
        if x[0] < best[0] * (1 - 1e-9):
            best = x
    out = []
    kind = "context" if best[2] == "spatial" and any(layer.op == "attention" for layer in net.layers) else best[2]
    for name, (_, _, spec, strategies) in ((DATA_PARALLEL, data), (f"best uniform ({kind})", best)):
        pred = predicted.get(spec) or predict_step(net, batch, strategies, fastest_algorithms(
            net, strategies, batch, machine, compute, optimizer), machine, compute, optimizer, overlap=overlap)
        out.append(PricedBaseline(name, pred, _fits(pred.memory_bound_bytes, limit)))
    return out


class _Groups:
    """A network's layers grouped by :func:`planner.problem.build.signature` (each group's first
    layer, and each layer's group), compared once for every spec :func:`uniform` is asked."""

    def __init__(self, net: Network):
        index: dict = {}
        firsts, self.of = [], []
        for layer in net.layers:
            group = index.setdefault(signature(layer), len(firsts))
            if group == len(firsts):
                firsts.append(layer)
            self.of.append(group)
        self.firsts = tuple(firsts)
        self.distinct = dataclasses.replace(net, layers=self.firsts)


def uniform(net: Network, p: int, batch: int, spec: str, groups: _Groups | None = None) -> dict[str, Strategy]:
    """``costmodel.frameworks.uniform.uniform_strategies``' strategy for every layer, chosen once for
    each distinct layer: the choice depends on the layer's op, parameters and shapes alone (its
    :func:`planner.problem.build.signature`), and a transformer repeats one block's layers
    (llama3.1-405b: 1,012 layers, a dozen distinct; 70 specs were seconds). ``groups``: the layers
    grouped so, when known."""
    groups = groups or _Groups(net)
    chosen, _ = uniform_strategies(groups.distinct, p, batch, spec)
    by_group = [chosen[layer.name] for layer in groups.firsts]
    return {layer.name: by_group[g] for g, layer in zip(groups.of, net.layers)}


def _candidate_uniforms(net: Network, batch: int, p: int, built: Built,
                        groups: _Groups | None = None) -> list[tuple[float, float, str, dict]]:
    """Every strategy that is a candidate of some layer, applied to every layer that has it as a
    candidate (else the spec is skipped), priced on the built problem: (step, memory, spec, strategies)."""
    out = []
    # layers of one node share its candidates and fastest (the same objects): each looked up once
    nodes = {(id(cands), id(fast)): (cands, fast) for cands, fast in zip(built.candidates, built.fastest)}
    lookups = {key: {cands[c][0]: int(c) for c in fast} for key, (cands, fast) in nodes.items()}
    lookup = [lookups[(id(cands), id(fast))] for cands, fast in zip(built.candidates, built.fastest)]
    labels = sorted({s.label for cands, _ in nodes.values() for s, _ in cands} - {"replicated", "serial"})
    for label in labels:
        spec = ",".join(part for part in label.split(",") if not part.startswith("R="))
        strategies = uniform(net, p, batch, spec, groups)
        found: dict[tuple[int, int], int | None] = {}  # (node's lookup, strategy) -> its candidate
        choice = []
        for i, layer in enumerate(net.layers):
            strategy = strategies[layer.name]
            key = (id(lookup[i]), id(strategy))
            if key not in found:
                found[key] = lookup[i].get(strategy)
            choice.append(found[key])
        if any(c is None for c in choice):
            continue
        step, memory = evaluate(built.problem, choice)
        out.append((step, memory, spec, strategies))
    return out


def _fits(memory: float, limit: float) -> bool:
    return memory <= limit * (1 + FIT_RTOL)
