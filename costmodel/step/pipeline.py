"""Pipeline parallelism: contiguous stages on disjoint rank groups, micro-batches, GPipe and 1F1B
(pure).

The network's layers (in topological order) are cut into ``S`` contiguous stages: an equal number
of whole blocks each when the network is a stack of repeated blocks that divides evenly (as
Megatron-LM cuts), else balanced by their training FLOPs; stage ``s`` runs on ranks ``[s d, (s + 1) d)`` with ``d = P / S`` and its
own strategy inside (``predict_step`` of the stage as a network of its own, its cut inputs
arriving from the stage before). The batch is cut into ``m`` micro-batches. With ``T_s`` stage
``s``'s forward and backward of one micro-batch plus its point-to-point sends (the activation
forward, its gradient back), a synchronous schedule's step is (Narayanan et al., SC21, section
2.2; Huang et al., GPipe, 2019)::

    step = sum_s T_s + (m - 1) max_s T_s          (fill and drain, then the slowest stage)
         + max_s (gradient sync_s + update_s)     (once per step, every stage at once)

the same for GPipe and 1F1B. Interleaved 1F1B (Narayanan et al., SC21, section 2.2.2) cuts the layers
into ``V S`` chunks, device ``s`` holding chunks ``s, s + S, ...``; with ``T_s`` the device's time per
micro-batch over all its chunks (and its ``V`` sends each way), the fill and drain shrink ``V``
times::

    step = m max_s T_s + (sum_s T_s - max_s T_s) / V + max_s O_s      (V = 1: the formula above)

(a tied LM head on another stage than its embedding keeps a copy of
the table, priced as its weight, and the two stages' ranks sum their gradients of it in a two-rank
allreduce, once a step on each of the two; Megatron-LM's embedding group); the bubble is ``sum_s T_s - max_s T_s``, a fraction (S - 1) / m of the
steady state for equal stages. They differ in memory: GPipe keeps the activations of all ``m``
micro-batches until its backward, 1F1B at most ``S - s`` on stage ``s`` (stage 0 the most);
interleaved, each chunk's micro-batches in flight over Megatron's order times that chunk's
activations, at the order's busiest moment (``costmodel.memory.pipeline``, :func:`device_kept`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from costmodel.machine.model import Machine
from costmodel.comm.overlap import hidden_expert_s, unpaired_passes
from costmodel.comm.spans import pipeline_view
from costmodel.memory.pipeline import held_bytes, warm_up
from costmodel.step.prediction import StepPrediction, prediction_json
from costmodel.layer.tied import crossing_ties, tied_sync_s, with_table
from networks.analysis import block_of, layer_cost
from networks.errors import DnnplanError
from networks.ir import DTYPE_BYTES, InputSpec, Layer, Network
from networks.ops.base import prod

SCHEDULES = ("1f1b", "gpipe")  # what plans and the executor run
INTERLEAVED = "interleaved"  # priced (dnnplan predict --chunks), not yet planned or run


@dataclass(frozen=True)
class StagePrediction:
    index: int
    layers: tuple[str, ...]  # first .. last layer of the stage
    ranks: int
    micro: StepPrediction  # the stage's step on one micro-batch
    p2p_s: float  # its sends per micro-batch: activation forward and gradient backward
    kept_micro_batches: float  # micro-batches' worth of its activations held at its peak (interleaved: chunk by chunk)
    tied_sync_s: float = 0.0  # once a step: the tied table's gradient summed with the other stage holding it
    #: once a step: the expert all-to-alls of the passes the combined 1F1B schedule runs alone (its
    #: warm-up forwards, its cool-down backwards: :func:`unpaired_expert_s`), which ``+experts`` hides in the others
    unpaired_s: float = 0.0

    @property
    def per_micro_s(self) -> float:
        """T_s: forward and backward of one micro-batch and the stage's sends."""
        return self.micro.fwd_s + self.micro.bwd_s + self.micro.dispatch_s + self.p2p_s

    @property
    def once_s(self) -> float:
        """Once per step: the gradient sync (the tied table's sum between stages included), the update
        and the expert all-to-alls no other micro-batch's pass hides (:attr:`unpaired_s`)."""
        return self.micro.sync_s + self.micro.update_s + self.tied_sync_s + self.unpaired_s

    @property
    def memory_peak_bytes(self) -> int:
        return self.micro.memory_peak_bytes + int(self.micro.activation_bytes * (self.kept_micro_batches - 1))

    @property
    def memory_allocated_bytes(self) -> int:
        """The peak without what the framework adds (StepPrediction.memory_allocated_bytes)."""
        return self.memory_peak_bytes - self.micro.framework_bytes

    @property
    def memory_parts(self) -> dict[str, int]:
        """The stage's peak by what holds it (StepPrediction.memory_parts): one micro-batch's parts,
        the activations of the micro-batches (chunks) the schedule holds beyond it added, so they
        sum to :attr:`memory_peak_bytes`."""
        parts = dict(self.micro.memory_parts)
        parts["activations"] = parts.get("activations", 0) + self.memory_peak_bytes - sum(parts.values())
        return parts


@dataclass(frozen=True)
class PipelinePrediction:
    network: str
    batch: int
    devices: int
    micro_batches: int
    schedule: str
    stages: tuple[StagePrediction, ...]
    chunks: int = 1  # interleaved 1F1B: model chunks a device holds
    #: what the framework holds beyond the tensors on the fullest device: context, communicator
    #: buffers and the caching allocator's reserve (costmodel.frameworks.as_run.pipeline_as_run)
    framework_bytes: int = 0

    @property
    def bubble_s(self) -> float:
        t = [s.per_micro_s for s in self.stages]
        return (sum(t) - max(t)) / self.chunks

    @property
    def step_s(self) -> float:
        t = [s.per_micro_s for s in self.stages]
        return self.micro_batches * max(t) + self.bubble_s + max(s.once_s for s in self.stages)

    @property
    def bubble_fraction(self) -> float:
        """The bubble over the step's pipelined part."""
        return self.bubble_s / (self.step_s - max(s.once_s for s in self.stages))

    @property
    def memory_peak_bytes(self) -> int:
        """The peak on the fullest stage's device, as the framework holds it."""
        return self.memory_allocated_bytes + self.framework_bytes

    @property
    def memory_allocated_bytes(self) -> int:
        """The tensors' peak on the fullest stage's device (the framework's additions left out)."""
        return max(s.memory_allocated_bytes for s in self.stages)

    @property
    def memory_reserved_bytes(self) -> int:
        """The peak as the framework holds it (StepPrediction.memory_reserved_bytes)."""
        return self.memory_peak_bytes


def pipeline_json(pred: PipelinePrediction) -> dict:
    """The ``dnnplan predict --pipeline --json`` object: each stage with its layers (one
    micro-batch's times per layer, as a step's: ``costmodel.step.prediction.prediction_json``) and
    its peak by part; the step's peak by part where the fullest stage's peak is the step's; of one
    stage (gradient accumulation: a plan file's ``pipeline: {stages: 1, ...}``), its layers and
    overlap at the top too, as a step's."""
    out = _pipeline_json(pred)
    for row, stage in zip(out["stages"], pred.stages):
        row["layers"] = prediction_json(stage.micro)["layers"]
        row["memory_parts_bytes"] = stage.memory_parts
    fullest = max(pred.stages, key=lambda s: s.memory_peak_bytes)
    if fullest.memory_peak_bytes == pred.memory_peak_bytes:  # its peak is the step's
        out["memory_parts_bytes"] = fullest.memory_parts
    if len(pred.stages) == 1:
        one = prediction_json(pred.stages[0].micro)
        out |= {key: one[key] for key in ("micro_batch", "overlap", "layers")}
    return out


def _pipeline_json(pred: PipelinePrediction) -> dict:
    return {"network": pred.network, "batch": pred.batch, "devices": pred.devices, "micro_batches": pred.micro_batches,
            "schedule": pred.schedule, "chunks": pred.chunks, "step_s": pred.step_s, "bubble_s": pred.bubble_s,
            "bubble_fraction": pred.bubble_fraction, "memory_peak_bytes": pred.memory_peak_bytes,
            "memory_allocated_bytes": pred.memory_allocated_bytes, "memory_reserved_bytes": pred.memory_reserved_bytes,
            "stages": [{"stage": s.index, "first_layer": s.layers[0], "last_layer": s.layers[1], "ranks": s.ranks,
                        "per_micro_batch_s": s.per_micro_s, "fwd_s": s.micro.fwd_s, "bwd_s": s.micro.bwd_s,
                        "p2p_s": s.p2p_s, "tied_sync_s": s.tied_sync_s, "once_s": s.once_s, "kept_micro_batches": s.kept_micro_batches,
                        "memory_peak_bytes": s.memory_peak_bytes} for s in pred.stages]}


def balanced_stages(net: Network, stages: int) -> list[list[Layer]]:
    """``net``'s layers cut into ``stages`` contiguous runs of about equal training FLOPs (greedy on
    the running total: each cut at the layer where the cumulative FLOPs cross the next share)."""
    if not 1 <= stages <= len(net.layers):
        raise DnnplanError(f"cannot cut {net.name}'s {len(net.layers)} layers into {stages} stages",
                           hint=f"use --pipeline from 1 to {len(net.layers)}")
    flops = [max(sum(layer_cost(layer, 1).flops), 1) for layer in net.layers]
    total, out, acc = sum(flops), [[]], 0.0
    for i, (layer, f) in enumerate(zip(net.layers, flops)):
        left_layers, left_stages = len(net.layers) - i, stages - len(out) + 1
        if out[-1] and len(out) < stages and (acc + f / 2 > total * len(out) / stages or left_layers < left_stages):
            out.append([])
        out[-1].append(layer)
        acc += f
    return out


def block_runs(net: Network) -> tuple[list[Layer], list[list[Layer]], list[Layer]] | None:
    """``net``'s layers as (those before the first block, each block's layers, those after the last),
    a block being the layers named ``block.layer`` (``networks.analysis.block_of``); None when
    layers lie between blocks (not a plain stack)."""
    blocks: list[list[Layer]] = []
    before, after = [], []
    for layer in net.layers:
        block = block_of(layer)
        if block is None:
            (after if blocks else before).append(layer)
        elif after:
            return None  # layers between blocks: not a plain stack
        elif blocks and block_of(blocks[-1][0]) == block:
            blocks[-1].append(layer)
        else:
            blocks.append([layer])
    return before, blocks, after


def block_stages(net: Network, stages: int) -> list[list[Layer]] | None:
    """Megatron-LM's cut (Narayanan et al. SC21, section 2.2): the same number of whole repeated
    blocks (the layers named ``block.layer``, every block the same ops) on every stage, the layers before the first block on
    the first stage and those after the last on the last; None when the blocks do not divide evenly
    over the stages (or there are none)."""
    runs = block_runs(net)
    if runs is None:
        return None
    before, blocks, after = runs
    if not blocks or len(blocks) % stages or len({tuple(layer.op for layer in b) for b in blocks}) > 1:
        return None
    per = len(blocks) // stages
    out = [[layer for block in blocks[s * per:(s + 1) * per] for layer in block] for s in range(stages)]
    out[0] = before + out[0]
    out[-1] = out[-1] + after
    return out


def ends_as_blocks(net: Network, stages: int) -> list[list[Layer]] | None:
    """The cut that counts the layers before the blocks (the embedding) and those after them (the
    output layer and loss) as one block each: ``n + 2`` blocks, the same number on every stage, so
    the first and last stages hold one transformer block fewer. Megatron-Core's
    ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``; Llama 3's
    schedule (Dubey et al. 2024, section 3.3.2: "we reduce one Transformer layer each from the first
    and the last stages"). With interleaving, ``stages`` is every device's chunks (``S V``); None when
    ``n + 2`` blocks do not divide evenly (or a stage would be empty of everything)."""
    runs = block_runs(net)
    if runs is None:
        return None
    before, blocks, after = runs
    if not blocks or (len(blocks) + 2) % stages or len({tuple(layer.op for layer in b) for b in blocks}) > 1:
        return None
    per = (len(blocks) + 2) // stages
    bounds = [max(0, min(len(blocks), s * per - 1)) for s in range(stages + 1)]
    out = [[layer for block in blocks[a:b] for layer in block] for a, b in zip(bounds, bounds[1:])]
    out[0] = before + out[0]
    out[-1] = out[-1] + after
    return out if all(out) else None


def stage_network(net: Network, layers: list[Layer], index: int) -> tuple[Network, int]:
    """The stage as a network of its own (a tensor it reads from an earlier stage is an input),
    and the bytes per sample it receives that way. A tied LM head whose embedding is on another
    stage holds its own copy of the table there, as its ``weight`` (module docstring)."""
    names = {layer.name for layer in layers}
    layers = [with_table(layer) if layer.p.get("tied_to") and layer.p["tied_to"] not in names else layer
              for layer in layers]
    by_name = {layer.name: layer for layer in net.layers}
    inputs, received = {}, 0
    for layer in layers:
        for src in layer.inputs:
            if src in names or src in inputs:
                continue
            if src in by_name:
                producer = by_name[src]
                inputs[src] = InputSpec(src, producer.out_shape, producer.dtype)
                received += prod(producer.out_shape) * DTYPE_BYTES.get(producer.dtype, 4)
            else:
                inputs[src] = net.input_spec(src)
    return dataclasses.replace(net, name=f"{net.name}[stage {index}]", inputs=tuple(inputs.values()),
                               layers=tuple(layers)), received


def cut_at(net: Network, first_layers: tuple[str, ...]) -> list[list[Layer]]:
    """``net``'s layers cut into stages starting at ``first_layers`` (a plan's cut; the first of them
    must be the network's first layer, the others later layers in order)."""
    index = {layer.name: i for i, layer in enumerate(net.layers)}
    unknown = [name for name in first_layers if name not in index]
    if unknown:
        raise DnnplanError(f"the stages' first layer '{unknown[0]}' is not a layer of {net.name}",
                           hint=f"name layers of the network, the first stage starting at '{net.layers[0].name}'")
    starts = [index[name] for name in first_layers]
    if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])):
        raise DnnplanError(f"the stages' first layers {', '.join(first_layers)} do not cut {net.name} in order",
                           hint=f"the first stage starts at '{net.layers[0].name}', each next one at a later layer")
    ends = starts[1:] + [len(net.layers)]
    return [list(net.layers[a:b]) for a, b in zip(starts, ends)]


def predict_pipeline(net: Network, batch: int, devices: int, stages: int, micro_batches: int, schedule: str,
                     machine: Machine, predict_stage: Callable[[Network, int, int, Machine], StepPrediction],
                     cuts: list[list[Layer]] | None = None, chunks: int = 1) -> PipelinePrediction:
    """The pipelined step of ``net`` (module docstring). ``predict_stage(stage network, ranks,
    micro-batch, machine)`` predicts one stage on its own ranks at one micro-batch (its strategies
    chosen by the caller) on ``machine`` as a stage sees it (``costmodel.comm.spans.pipeline_view``:
    its collectives on the slowest group of every stage); ``cuts``: the stages' layers (default: Megatron's cut, else balanced); ``chunks``:
    under the interleaved schedule, the model chunks each device holds (module docstring)."""
    _check(batch, devices, stages, micro_batches, schedule, chunks)
    d, mb, n = devices // stages, batch // micro_batches, stages * chunks
    cuts = cuts or block_stages(net, n) or balanced_stages(net, n)
    received = [stage_network(net, layers, c)[1] for c, layers in enumerate(cuts)]
    stage_of = {layer.name: c % stages for c, layers in enumerate(cuts) for layer in layers}
    ties = crossing_ties(net, stage_of.__getitem__)
    ends = sorted({stage_of[name] for name in ties}) or [0, 0]
    view = pipeline_view(machine, devices, stages)
    out = []
    for s in range(stages):
        mine = range(s, n, stages)  # chunks s, s + S, ...: device s's (one stage when not interleaved)
        stage_net, _ = stage_network(net, [layer for c in mine for layer in cuts[c]], s)
        # each of the d ranks sends its block of the micro-batch to the next chunk's device
        sends = sum(2 * p2p_s(machine, s * d, (c + 1) % stages * d, received[c + 1] * mb // d, d)
                    for c in mine if c + 1 < n and received[c + 1])
        micro = predict_stage(stage_net, d, mb, view)
        tied = tied_sync_s(stage_net, {x.layer.name: x.layer.strategy for x in micro.layers}, ties, machine,
                           (ends[0] * d, ends[-1] * d), d)
        kept = device_kept(schedule, stages, s, micro_batches, micro, [cuts[c] for c in mine])
        alone = unpaired_expert_s(schedule, stages, s, micro_batches, chunks, micro)
        out.append(StagePrediction(s, (cuts[s][0].name, cuts[mine[-1]][-1].name), d, micro, sends, kept, tied,
                                   alone))
    return PipelinePrediction(net.name, batch, devices, micro_batches, schedule, tuple(out), chunks)


def unpaired_expert_s(schedule: str, stages: int, s: int, m: int, chunks: int, micro: StepPrediction) -> float:
    """Device ``s``'s expert all-to-alls that ``+experts`` hides but Megatron-Core's combined 1F1B
    schedule cannot: its warm-up forwards and one more, and as many cool-down backwards, run alone
    (costmodel.comm.overlap.unpaired_passes), each a ``1 / chunks`` share of the device's passes;
    under GPipe no forward meets a backward, so every pass runs alone. ``micro``: the device's
    step on one micro-batch."""
    fwd, bwd = hidden_expert_s(micro.layers, "fwd"), hidden_expert_s(micro.layers, "bwd")
    if fwd + bwd == 0:
        return 0.0
    if schedule == "gpipe":
        return m * (fwd + bwd)
    warm = warm_up(stages, s, m, chunks) if chunks > 1 else min(stages - s - 1, m)
    return unpaired_passes(stages, s, m, chunks, warm) * (fwd + bwd) / chunks


def _check(batch: int, devices: int, stages: int, micro_batches: int, schedule: str, chunks: int) -> None:
    if schedule not in SCHEDULES + (INTERLEAVED,):
        raise DnnplanError(f"unknown --schedule {schedule!r}", hint="use 1f1b, gpipe or interleaved")
    if (schedule == INTERLEAVED) != (chunks > 1):
        raise DnnplanError(f"the interleaved schedule needs 2 or more model chunks a device, got --chunks {chunks}"
                           if schedule == INTERLEAVED else
                           f"--chunks {chunks} cuts each device's layers into model chunks, which only the interleaved "
                           f"schedule runs (--schedule {schedule})",
                           hint="interleave with --schedule interleaved --chunks V (V >= 2), else --chunks 1")
    if devices % stages:
        raise DnnplanError(f"{stages} pipeline stages do not divide {devices} devices",
                           hint="choose --pipeline dividing --devices")
    if batch % micro_batches:
        raise DnnplanError(f"{micro_batches} micro-batches do not divide the batch {batch}",
                           hint="choose --micro-batches dividing --batch")
    if chunks > 1 and micro_batches % stages:
        raise DnnplanError(f"the interleaved schedule runs micro-batches in groups of the {stages} stages; "
                           f"{micro_batches} is not a multiple", hint="choose --micro-batches a multiple of --pipeline")


def kept_micro_batches(schedule: str, stages: int, s: int, m: int, chunks: int = 1) -> float:
    """Micro-batches whose activations device ``s`` holds at its peak: all ``m`` under GPipe,
    ``min(S - s, m)`` under 1F1B; interleaved with equal chunks, Megatron-LM's warm-up of
    ``2 (S - s - 1) + (V - 1) S`` chunk forwards and one more (all ``m V`` when ``m = S``), each a
    ``1 / V`` share of the device's activations (megatron/core/pipeline_parallel/schedules.py, the
    interleaved schedule; :func:`device_kept` counts unequal chunks)."""
    if schedule == "gpipe":
        return m
    if chunks == 1:
        return min(stages - s, m)
    return min(warm_up(stages, s, m, chunks) + 1, m * chunks) / chunks


def device_kept(schedule: str, stages: int, s: int, m: int, micro: StepPrediction,
                chunk_layers: list[list[Layer]]) -> float:
    """Device ``s``'s peak activations in micro-batches of all its layers' (``micro.activation_bytes``):
    under the interleaved schedule the most, over its order, of each chunk's micro-batches in
    flight times that chunk's activations (``costmodel.memory.pipeline``), ``chunk_layers`` its
    chunks in order; else :func:`kept_micro_batches`."""
    chunks, total = len(chunk_layers), micro.activation_bytes
    if schedule != INTERLEAVED or chunks == 1 or total <= 0:
        return kept_micro_batches(schedule, stages, s, m, chunks)
    acts = {x.layer.name: x.layer.memory.activations for x in micro.layers}
    per_chunk = tuple(sum(acts.get(layer.name, 0) for layer in layers) for layers in chunk_layers)
    return held_bytes(stages, s, m, per_chunk) / total


def p2p_s(machine: Machine, src: int, dst: int, nbytes: int, ranks: int = 1) -> float:
    """One point-to-point message of ``nbytes`` from rank ``src`` to ``dst`` (alpha + n beta of the
    level that joins them: ``intra`` inside one link domain, Machine.same_domain); with ``ranks``,
    each of ``src .. src + ranks - 1`` sends its own to its peer from ``dst`` on, all at once, and the
    slowest pair sets the time (a stage's ranks sending to the next stage's: one pair across a
    domain's edge crosses, Machine.pairs_same_domain)."""
    link = machine.intra if machine.pairs_same_domain(src, dst, ranks) else machine.inter
    return link.alpha_s + nbytes * link.beta_s_per_byte
