"""Plans made in-process as a framework lays them out, for the exporters' tests (planner.export):
Megatron's layout (costmodel.frameworks.megatron) on every layer, or data parallelism alone."""

from __future__ import annotations

import dataclasses

from costmodel.calls.algorithms import recompute_algorithms
from costmodel.choices.training import TrainingChoices
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.frameworks.uniform import data_strategy
from networks.loader import load_network
from planner.plan.plan import LayerPlan, PipelineSpec, Plan


def uniform_plan(name: str, devices: int = 4, batch: int = 8, tensor: int = 1, sp: bool = False, context: int = 1,
                 expert: int = 1, stages: int = 1, micro: int = 1, schedule: str = "1f1b", chunks: int = 1,
                 firsts: tuple[str, ...] | None = None, recompute: str = "none", machine: str = "dgx-a100",
                 **choices) -> tuple[Plan, object]:
    """``name``'s plan as Megatron lays it out: each stage's layers over ``devices / stages`` ranks at
    a micro-batch, ``recompute`` placed as `dnnplan predict --recompute` places it; ``micro`` micro-batches
    without ``firsts`` accumulate gradients (one stage)."""
    chosen = TrainingChoices(**choices)
    net = chosen.marked(load_network(name))
    strategies, _ = megatron_strategies(net, devices // stages, batch // micro, tensor, sequence_parallel=sp,
                                        context=context, expert=expert)
    return _plan(name, net, chosen, strategies, batch, devices, micro, schedule, chunks, stages, firsts, recompute,
                 machine)


def data_plan(name: str, devices: int = 4, batch: int = 8, micro: int = 1, recompute: str = "none",
              machine: str = "dgx-a100", **choices) -> tuple[Plan, object]:
    """``name``'s plan with every layer splitting the samples over every device (DeepSpeed's layout)."""
    chosen = TrainingChoices(**choices)
    net = chosen.marked(load_network(name))
    strategies = {layer.name: data_strategy(layer, devices, batch // micro) for layer in net.layers}
    return _plan(name, net, chosen, strategies, batch, devices, micro, "1f1b", 1, 1, None, recompute, machine)


def _plan(name, net, chosen, strategies, batch, devices, micro, schedule, chunks, stages, firsts, recompute, machine):
    algorithms = recompute_algorithms(net, recompute)
    layers = tuple(LayerPlan(layer.name, strategies[layer.name], algorithms.get(layer.name, ""))
                   for layer in net.layers)
    if firsts:
        pipeline = PipelineSpec(stages, micro, schedule, firsts, chunks)
    else:
        pipeline = PipelineSpec(1, micro, schedule, (net.layers[0].name,)) if micro > 1 else None
    plan = Plan(name, net.name, net.content_hash(), batch, devices, machine, layers, step_s=0.25, choices=chosen,
                pipeline=pipeline)
    return plan, net


def swapped(plan: Plan, layer: str, **change) -> Plan:
    """``plan`` with one layer's entry changed (an algorithm, a strategy)."""
    return dataclasses.replace(plan, layers=tuple(dataclasses.replace(lp, **change) if lp.name == layer else lp
                                                  for lp in plan.layers))
