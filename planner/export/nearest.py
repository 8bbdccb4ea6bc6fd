"""The closest plan a framework can run, for `dnnplan export --nearest` (pure).

A framework runs one layout on every layer and a few ways to recompute, pipeline and shard the
optimiser (:mod:`planner.export.megatron_layout`, :mod:`planner.export.torchtitan`,
:mod:`planner.export.deepspeed`); a plan the exporter refuses is made expressible by the fewest
changes, each said in one line:

- **the layout**: every layer under one layout, as :func:`costmodel.frameworks.megatron.megatron_strategies`
  splits each layer under it (refused where the framework cannot split the sequence under it:
  :func:`planner.export.megatron_layout.check_sequence`): by default the layout most of the
  transformer layers take (the tensor and context degrees of their attention, the expert degree
  of their mixture of experts, sequence parallelism);
  :func:`planner.export.nearest_layouts.layouts_weighed` lists it and the others the caller prices
  (executor.session.export_nearest); DeepSpeed's JSON states data parallelism only, so there the most common layout must be data-parallel, every layer then split over the
  samples; torchtitan's tensor parallelism adds sequence parallelism; a micro-batch the layout's
  data-parallel ranks cannot share is refused as the exporter refuses it;
- **the pipeline**: a stage cut inside a transformer layer moved to that layer's start; GPipe run
  as 1F1B where the framework lacks it (Megatron-LM);
- **recomputation**: attention's core (selective) where the framework has it and the plan
  recomputes attention layers but no transformer layer whole and nothing of their MLPs (a linear
  layer, an activation or a mixture of experts, whose memory selective recomputation does not
  save: Qwen3 30B-A3B's plan on 64 H100s recomputes its 48 mixtures of experts, and selective
  recomputation would hold 218.84 GiB a device where the plan holds 79.74); else, where the framework recomputes
  the first layers of each chunk (Megatron-LM's block method), as many first transformer layers of
  each chunk whole as the most any chunk recomputes part of; else every transformer layer whole
  (full): the plan recomputed to save memory, and the same count of a uniform stack's transformer
  layers recomputed whole saves at least as much; a plan recomputing only layers outside the
  transformer layers (the loss) recomputes none. Beside that rule the caller weighs the
  recomputations the framework states, whole transformer layers (``whole``: none, every layer,
  and, where the framework recomputes the first layers of each chunk, the fewest that fit;
  executor.session.export_nearest), for the fastest that fits;
- **the kernels**: Megatron-LM runs one attention backend, the most common of the plan's; torchtitan
  and DeepSpeed the machine's default; every convolution the default algorithm, which a file read
  back runs (no framework's file names one: :mod:`planner.export.attention_kernel`), so the nearest
  plan's predicted step is the file's;
- **ZeRO and overlap on torchtitan**: ZeRO-1, and ZeRO-0 beside other parallelism, as FSDP keeping
  the weights gathered (ZeRO-2); overlap ``none`` as ``data``, the gradient bucket as DDP's, without
  ``+experts``;
- **the weights' bytes on torchtitan and DeepSpeed**: FP8 parameters and float32 gradients left out
  (their files as dnnplan writes them state neither).

What no such change reaches (a convolution, learned positions on torchtitan, a pipeline on
DeepSpeed, a precision or optimiser the framework lacks) is still refused by the exporter. The plan
returned keeps the original's predicted numbers until priced again (executor.session.predict).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from costmodel.calls.algorithms import (attention_default, default_algorithms, is_recomputed, kernel_algorithm,
                                        with_recompute)
from costmodel.comm.overlap import BUCKET_MARK, DEFAULT_BUCKET_BYTES, EXPERTS
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.frameworks.uniform import data_strategy
from costmodel.machine.model import Machine
from costmodel.parallel.strategy import Strategy
from costmodel.step.pipeline import cut_at
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Network
from planner.export.attention_kernel import other_convolutions
from planner.export.file_states import FRAMEWORKS, TARGETS, Framework
from planner.export.megatron_layout import Target, blocks_of, check_sequence, gpt_layers, micro_hint
from planner.export.megatron_recompute import megatron_recompute
from planner.export.nearest_layouts import Layout, Weighed, layouts_weighed, most_common_layout
from planner.plan.plan import LayerPlan, Plan


#: a transformer layer's ops that selective recomputation stands for when a plan recomputes them (attention,
#: and the dropout, norms and residual adds around it); a recomputed linear layer, activation or mixture
#: of experts is the MLP's memory, which attention's core alone does not save
ATTENTION_SIDE = frozenset({"attention", "dropout", "layernorm", "rmsnorm", "add"})


@dataclass(frozen=True)
class Nearest:
    """The nearest plan ``framework`` can run and what was changed to reach it (``changes``: one line
    each, empty when the plan is expressible as it is)."""

    plan: Plan
    changes: tuple[str, ...]
    #: some layer was split otherwise than the plan splits it (its layout not every layer's)
    relaid: bool = False


def nearest_plan(plan: Plan, net: Network, framework: str, machine: Machine,
                 layout: Weighed | None = None, whole: int | None = None) -> Nearest:
    """The plan closest to ``plan`` of ``net`` that ``framework`` (megatron, torchtitan, deepspeed)
    can express (module docstring); ``machine``: the plan's, for its default attention kernel;
    ``layout``: one of :func:`planner.export.nearest_layouts.layouts_weighed` on every layer (None: the most common);
    ``whole``: the first ``whole`` transformer layers of each chunk recomputed whole instead of the
    recomputation nearest the plan's (:func:`recompute_counts`)."""
    fw = FRAMEWORKS[framework]
    if fw.model_parallel:
        gpt_layers(net, TARGETS[framework])  # not a transformer the framework's model holds: nothing near it either
    changes: list[str] = []
    pipeline = _pipeline(plan, net, fw, changes)
    plan = dataclasses.replace(plan, pipeline=pipeline)
    strategies, layout = _strategies(plan, net, fw, TARGETS.get(framework), changes, layout)
    algorithms = _algorithms(plan, net, fw, machine, changes, whole)
    choices = _choices(plan, layout, fw, changes)
    layers = tuple(LayerPlan(layer.name, strategies[layer.name], algorithms.get(layer.name, ""))
                   for layer in net.layers)
    if not changes:
        return Nearest(plan, ())
    relaid = any(strategies[layer.name] != plan.strategies()[layer.name] for layer in net.layers)
    return Nearest(dataclasses.replace(plan, layers=layers, choices=choices, baselines=(),
                                       solver={**plan.solver, "nearest": framework}), tuple(changes), relaid)


def _strategies(plan: Plan, net: Network, fw: Framework, target: Target | None,
                changes: list[str], weighed: Weighed | None = None) -> tuple[dict[str, Strategy], Layout]:
    """Every layer under ``weighed``'s layout, else the most common (module docstring), and that
    layout; one line where ``target`` (the framework's transformer model) cannot split the sequence
    under it."""
    layout, count, blocks = most_common_layout(plan, net)
    whose = f"that of {count} of the {blocks} transformer layers"
    if weighed is not None:
        layout, whose = weighed.layout, weighed.whose
    ranks, micro = plan.stage_ranks, plan.micro_batch
    if not fw.model_parallel and layout != Layout():
        raise DnnplanError(f"{count} of the {blocks} transformer layers run {layout}: {fw.name}'s configuration "
                           "states data parallelism only (its model parallelism is set in the script)",
                           layer=next(layer.name for layer in net.layers if layer.op == "attention"),
                           hint="export the plan to Megatron-LM or torchtitan")
    _check_micro_batch(plan, net, fw, layout)
    if not fw.model_parallel:
        want = {layer.name: data_strategy(layer, ranks, micro) for layer in net.layers}
    else:
        if fw.fsdp and layout.tensor > 1 and not layout.sequence_parallel:
            layout = dataclasses.replace(layout, sequence_parallel=True)
            changes.append(f"sequence parallelism added: {fw.name}'s tensor parallelism splits the norms over the "
                           "sequence")
        try:
            check_sequence(net, target, layout.tensor, layout.context, layout.sequence_parallel)
        except DnnplanError as err:
            raise DnnplanError(f"{err.bare}, under the layout most transformer layers take ({layout})",
                               layer=err.layer, hint=err.hint) from None
        want, fallbacks = megatron_strategies(net, ranks, micro, layout.tensor, layout.sequence_parallel,
                                              context=layout.context, expert=layout.expert)
        if fallbacks:
            f = fallbacks[0]
            raise DnnplanError(f"cannot split {f.wanted} ({f.reason}) under the most common layout, {layout}",
                               layer=f.layer, hint="re-plan with tensor, context and expert sizes that divide it")
    moved = [layer.name for layer in net.layers if plan.strategies()[layer.name] != want[layer.name]]
    if moved:
        transformer = any(layer.op == "attention" for layer in net.layers)  # a CNN's blocks are no transformer layers
        which = f"{layout} ({whose})" if blocks and transformer else \
            "data parallelism (the network has no transformer layers)"
        before = f"{moved[0]} split otherwise before" if len(moved) == 1 else \
            f"{len(moved)} layers split otherwise before, the first {moved[0]}"
        changes.append(f"one layout on every layer, {which}: {before}")
    return want, layout


def _check_micro_batch(plan: Plan, net: Network, fw: Framework, layout: Layout) -> None:
    """One line, as the exporter's, where a micro-batch does not split over the data-parallel ranks of
    the layout (a layout change would not reach it: the micro-batches are the plan's to change)."""
    data = plan.stage_ranks // (layout.tensor * layout.context)
    if plan.micro_batch % data:
        what = "data-parallel ranks" if fw.model_parallel else "devices"
        first = next((layer.name for layer in net.layers if layer.op == "attention"), net.layers[0].name) \
            if fw.model_parallel else net.layers[0].name
        under = f" under the layout most transformer layers take ({layout})" if layout != Layout() else ""
        raise DnnplanError(f"a micro-batch of {plan.micro_batch} samples does not split over {data} {what}{under}",
                           layer=first, hint=micro_hint(plan.batch, plan.batch // plan.micro_batch, data, what))


def _pipeline(plan: Plan, net: Network, fw: Framework, changes: list[str]):
    """The plan's pipeline with each cut inside a transformer layer moved to that layer's start and,
    where the framework lacks the schedule, 1F1B (a framework without a pipeline keeps it: refused)."""
    pipe = plan.pipeline
    if pipe is None or pipe.stages == 1 or not fw.schedules:
        return pipe
    first_of: dict[str, str] = {}
    for layer in net.layers:
        if block_of(layer) is not None:
            first_of.setdefault(block_of(layer), layer.name)
    by_name = {layer.name: layer for layer in net.layers}
    firsts = tuple(pipe.first_layers[:1]) + tuple(first_of.get(block_of(by_name[name]), name)
                                                 if block_of(by_name[name]) is not None else name
                                                 for name in pipe.first_layers[1:])
    if firsts != pipe.first_layers:
        moved = next(a for a, b in zip(pipe.first_layers, firsts) if a != b)
        changes.append(f"the pipeline cut at {moved} moved to the start of its transformer layer, "
                       f"{first_of[block_of(by_name[moved])]}: {fw.name} cuts between whole transformer layers")
    schedule = pipe.schedule
    if schedule not in fw.schedules:
        schedule = "1f1b"
        changes.append(f"the {pipe.schedule} schedule run as 1F1B: {fw.name} has no {pipe.schedule}")
    return dataclasses.replace(pipe, first_layers=firsts, schedule=schedule)


def _algorithms(plan: Plan, net: Network, fw: Framework, machine: Machine, changes: list[str],
                whole: int | None = None) -> dict[str, str]:
    """The attention kernel and recomputation the framework states nearest the plan's (module
    docstring); a plan recomputing layers outside the transformer layers alone (the loss) recomputes
    none. ``whole``: instead, the first ``whole`` transformer layers of each pipeline chunk recomputed
    whole (0 none, at least a chunk's layers every one; between, only where the framework
    recomputes the first layers of each chunk), one of the recomputations the caller weighs
    (:func:`recompute_counts`)."""
    algorithms = plan.algorithms()
    attention = [layer for layer in net.layers if layer.op == "attention"]
    default = attention_default(machine)
    kernels = [kernel_algorithm(algorithms.get(layer.name, "")) or default for layer in attention]
    kernel = Counter(kernels).most_common(1)[0][0] if fw.one_kernel else default
    if any(k != kernel for k in kernels):
        changes.append(f"attention by {kernel} kernels on every layer: {fw.name} runs "
                       + ("one attention backend" if fw.one_kernel else f"the machine's default ({default})"))
    convs, other = default_algorithms(net), other_convolutions(plan, net)
    if other:
        conv = convs[other[0]]
        changes.append(f"every convolution by {conv}, where the plan chose another on {len(other)} (the first "
                       f"{other[0]}): {fw.name}'s file names no convolution algorithm, and is read back with {conv}")
    out = {name: a for name, a in algorithms.items() if not is_recomputed(a)}
    out |= {layer.name: kernel for layer in attention} | convs
    recomputed = [layer for layer in net.layers if is_recomputed(algorithms.get(layer.name, ""))]
    names = {layer.name for layer in recomputed}
    was = ("nothing" if not names else f"{recomputed[0].name}" if len(names) == 1 else
           f"{len(names)} layers (the first {recomputed[0].name})")
    if whole is None and (not names or (attention and _expressible_recompute(plan, net, fw))):
        return out | {name: with_recompute(out.get(name, "")) for name in names}
    layers_of: dict[str, list[str]] = {}
    for layer in net.layers:
        if block_of(layer) is not None and attention:  # a CNN's blocks are no transformer layers
            layers_of.setdefault(block_of(layer), []).append(layer.name)
    if not layers_of:  # no transformer layers to recompute whole (a CNN on DeepSpeed)
        if names:
            changes.append(f"no recomputation, where the plan recomputed {was}: {fw.name} recomputes the transformer "
                           "layers the script wraps")
        return out
    chunks = _chunks(plan, net)
    longest = max(map(len, chunks))
    if whole is not None:
        first = min(whole, longest) if fw.block_recompute or whole == 0 else longest
        wanted = {name for chunk in chunks for b in chunk[:first] for name in layers_of[b]}
        if wanted != names:
            what = ("no recomputation" if first == 0 else "recomputation of every transformer layer whole (full)"
                    if first == longest else "recomputation of " + (
                        "the first transformer layer" if first == 1 else f"the first {first} transformer layers")
                    + (" of each pipeline chunk" if len(chunks) > 1 else "") + " whole (full, block)")
            changes.append(f"{what}, where the plan recomputed {was}: of the recomputations {fw.name} states, the "
                           "fastest that fits")
        return out | {name: with_recompute(out.get(name, "")) for name in wanted}
    whole_block = any(all(name in names for name in block) for block in layers_of.values())
    # the most transformer layers any chunk recomputes part of: as many first ones of each chunk, whole
    first = max(sum(any(name in names for name in layers_of[b]) for b in chunk) for chunk in chunks)
    if first == 0:  # only layers outside the transformer layers (the loss): none it states
        which = f"{len(names)} layers outside the transformer layers (the first {recomputed[0].name})" \
            if len(names) > 1 else f"{recomputed[0].name}, outside the transformer layers"
        changes.append(f"no recomputation, where the plan recomputed {which}: {fw.name} recomputes transformer "
                       "layers only")
        return out
    mlp = [layer for layer in recomputed if block_of(layer) is not None and layer.op not in ATTENTION_SIDE]
    if fw.selective and not whole_block and not mlp and any(layer.op == "attention" for layer in recomputed):
        wanted, what = {layer.name for layer in attention}, "attention's core on every transformer layer (selective)"
    elif fw.block_recompute and first < longest:
        wanted = {name for chunk in chunks for b in chunk[:first] for name in layers_of[b]}
        what = ("the first transformer layer" if first == 1 else f"the first {first} transformer layers") \
            + (" of each pipeline chunk" if len(chunks) > 1 else "") + " whole (full, block)"
    else:
        wanted, what = {name for block in layers_of.values() for name in block}, "every transformer layer whole (full)"
    changes.append(f"recomputation of {what}, where the plan recomputed {was}: {fw.name} recomputes "
                   + ("attention's core or whole transformer layers" if fw.selective else "whole transformer layers"))
    return out | {name: with_recompute(out.get(name, "")) for name in wanted}


def choices_weighed(plan: Plan, net: Network, framework: str) -> Iterator[tuple[Weighed, int | None]]:
    """Each (layout, ``whole``) a nearest plan is made of, in the order weighed: every layout of
    :func:`planner.export.nearest_layouts.layouts_weighed`, each with the recomputation nearest the
    plan's (None), none (0) and every transformer layer whole (for a network with transformer layers)."""
    longest, _ = recompute_counts(plan, net, framework)
    for weighed in layouts_weighed(plan, net, framework):
        for whole in (None, 0, longest) if longest else (None,):
            yield weighed, whole


def recompute_counts(plan: Plan, net: Network, framework: str) -> tuple[int, int]:
    """``(longest, step)``: the transformer layers of the longest pipeline chunk (recomputing that
    many first layers of each chunk whole is every layer, full) and the step between the counts the
    framework states (1: Megatron-LM's block method takes any; else only none and all, ``longest``);
    ``(0, 0)`` for a network without transformer layers."""
    if not any(layer.op == "attention" for layer in net.layers) or not blocks_of(net.layers):
        return 0, 0
    longest = max(map(len, _chunks(plan, net)))
    return longest, 1 if FRAMEWORKS[framework].block_recompute else longest


def _chunks(plan: Plan, net: Network) -> tuple[tuple[str, ...], ...]:
    """The transformer layers of each pipeline chunk in order (one chunk without a pipeline)."""
    pipe = plan.pipeline
    return (blocks_of(net.layers),) if pipe is None else \
        tuple(blocks_of(chunk) for chunk in cut_at(net, pipe.first_layers))


def _expressible_recompute(plan: Plan, net: Network, fw: Framework) -> bool:
    """Whether the framework states the plan's recomputation as it is (planner.export.megatron_recompute)."""
    try:
        got = megatron_recompute(plan, net, _chunks(plan, net))
    except DnnplanError:
        return False
    return (got.granularity != "selective" or fw.selective) and (got.method != "block" or fw.block_recompute)


def _choices(plan: Plan, layout: Layout, fw: Framework, changes: list[str]):
    """torchtitan's ZeRO and overlap nearest the plan's, and FP8 parameters and float32 gradients
    left out where the framework's file does not state them (module docstring); the others' as they are."""
    choices = plan.choices
    if not fw.weights_as_planned:
        if choices.fp8_params and choices.precision == "fp8":
            changes.append(f"FP8 parameters as a 16-bit weight beside its FP8 copy: {fw.name}'s file keeps each "
                           "weight in its own precision")
            choices = choices.but(fp8_params=False)
        if choices.sharded_optimizer.grad_bytes:
            changes.append(f"the gradients in the weights' precision, not float32: the {fw.name} file dnnplan writes "
                           "prices them so")
            choices = choices.but(grad_fp32=False)
    # Megatron-LM's alone: torchtitan's tensor parallelism is sequence-parallel here (_strategies), DeepSpeed has none
    if choices.overlap.partition(BUCKET_MARK)[0].removesuffix(EXPERTS) == "all" and layout.tensor > 1 \
            and not layout.sequence_parallel:
        changes.append("overlap data, where the plan's is all: Megatron-LM overlaps the tensor-parallel collectives "
                       "with their GEMMs (--tp-comm-overlap) only under sequence parallelism")
        choices = choices.but(overlap=choices.overlap.replace("all", "data", 1))
    if not fw.fsdp:
        return choices
    data = plan.stage_ranks // (layout.tensor * layout.context)
    experts_unsharded = choices.zero == 0 and (layout.context * layout.tensor) % layout.expert
    if choices.zero == 1 or (choices.zero == 0 and 1 < data != plan.devices) or experts_unsharded:
        why = "shards the optimiser state only with the weights" if choices.zero else \
            "splits the experts over FSDP's shard dimension" if experts_unsharded else \
            "runs DDP without other parallelism"
        changes.append(f"ZeRO-{choices.zero} as FSDP keeping the weights gathered from the forward to the backward "
                       f"(ZeRO-2): torchtitan {why}")
        choices = choices.but(zero=2)
    if choices.overlap:
        mode, _, bucket = choices.overlap.partition(BUCKET_MARK)
        want = mode.removesuffix(EXPERTS) if mode.removesuffix(EXPERTS) in ("data", "all") else "data"
        if want != mode or (bucket and float(bucket) * 2 ** 20 != DEFAULT_BUCKET_BYTES):
            changes.append(f"overlap {want} at DDP's 25 MiB bucket, where the plan's is {choices.overlap}: "
                           "torchtitan's FSDP and DDP always overlap, and its expert overlap is DualPipeV's only")
            choices = choices.but(overlap=want)
    return choices
