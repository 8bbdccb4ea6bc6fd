"""Pipelined plans: the pipeline search's choice as a :class:`Plan`, and a pipelined plan predicted
again from what it says (pure).

A pipelined plan (``Plan.pipeline``) keeps one entry per layer of the whole network, each layer's
strategy over its stage's ``devices / stages`` ranks at one micro-batch; the stages' first layers
say where each stage starts (``costmodel.step.pipeline.cut_at``).
"""

from __future__ import annotations

import dataclasses

from costmodel.choices.batch_norm import batch_norm_of
from costmodel.choices.moe_dispatch import moe_dispatch_of
from costmodel.step.breakdown import comm_parts, pipeline_terms
from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from costmodel.choices.training import TrainingChoices
from costmodel.step.pipeline import PipelinePrediction, cut_at, predict_pipeline
from costmodel.step.prediction import predict_step
from costmodel.parallel.strategy import Strategy
from networks.ir import Network
from planner.pipeline.interleave import chunk_firsts
from planner.problem.solve import plan_from_prediction
from planner.pipeline.search import PipelineChoice
from planner.pipeline.stack import roles
from planner.plan.plan import PipelineSpec, Plan


def plan_of_choice(choice: PipelineChoice, network_ref: str, machine_ref: str, profile_fingerprint: str | None,
                   choices: TrainingChoices, mfu: float) -> Plan:
    """The search's choice as a plan file holds it: every layer under its stage's solution (the
    solution of a canonical stage, :meth:`planner.pipeline.stack.Stack.stage`, mapped onto the stage's own
    layers by position), the stages' predictions and the pipelined step, under ``choices``."""
    stack, rl, v = choice.stack, roles(choice.stages), choice.chunks
    layers, firsts, start = [], [], 0
    for s, (k, stage) in enumerate(zip(choice.cut, choice.prediction.stages)):
        micro_plan = plan_from_prediction(stage.micro, stack.network, network_ref, machine_ref, None)
        if v > 1:  # the prediction's own layers (costmodel.step.pipeline.predict_pipeline's device network)
            layers += micro_plan.layers
            continue
        own = stack.layers(start, k, rl[s])
        firsts.append(own[0].name)
        canonical = stack.stage(k, rl[s]).layers
        names = dict(zip((layer.name for layer in canonical), (layer.name for layer in own)))
        layers += [dataclasses.replace(lp, name=names[lp.name]) for lp in micro_plan.layers]
        start += k
    pred = choice.prediction
    net = stack.network
    if v > 1:
        order = {layer.name: i for i, layer in enumerate(net.layers)}
        layers.sort(key=lambda lp: order[lp.name])
        firsts = list(chunk_firsts(stack, choice.stages, v))
    spec = PipelineSpec(choice.stages, choice.micro_batches, pred.schedule, tuple(firsts), v)
    return Plan(network=network_ref, network_name=net.name, network_hash=net.content_hash(), batch=choice.batch,
                devices=choice.devices, machine=machine_ref, layers=tuple(layers), step_s=pred.step_s,
                memory_peak_bytes=int(pred.memory_peak_bytes), profile_fingerprint=profile_fingerprint,
                solver={"method": "pipeline search", **choice.stats},
                choices=choices.as_planned(overlap=pred.stages[0].micro.overlap, batch_norm=batch_norm_of(net),
                                           moe_dispatch=moe_dispatch_of(net)),
                mfu=mfu, pipeline=spec, breakdown=pipeline_terms(pred), comm=comm_parts(pred))


def predict_pipelined(plan: Plan, net: Network, strategies: dict[str, Strategy], machine: Machine,
                      compute: ComputeModel, overlap=None) -> PipelinePrediction:
    """The pipelined step of a plan with ``Plan.pipeline``: each stage under ``strategies`` (the
    plan's, or the ones an executor runs) on its ranks at one micro-batch, its cut as written; a
    block recomputed whole checkpointed at its input (costmodel.memory.recompute); ``overlap``: the
    plan's mode at its framework's efficiencies (None: the plan's mode as written)."""
    overlap = plan.choices.overlap if overlap is None else overlap
    spec = plan.pipeline
    algorithms = plan.algorithms()
    optimizer = plan.choices.sharded_optimizer

    def stage(stage_net: Network, ranks: int, micro: int, view: Machine):
        own = {layer.name: strategies[layer.name] for layer in stage_net.layers}
        return predict_step(stage_net, micro, own, algorithms, view, compute, optimizer, checkpoints=True,
                            overlap=overlap)

    return predict_pipeline(net, plan.batch, plan.devices, spec.stages, spec.micro_batches, spec.schedule, machine,
                            stage, cut_at(net, spec.first_layers), spec.chunks)
