"""The layouts a nearest plan may take on every layer, for `dnnplan export --nearest` (pure).

A framework runs one layout on every layer (planner.export.nearest): by default the one most of
the plan's transformer layers take (:func:`most_common_layout`: the tensor and context degrees of
their attention, the expert degree of their mixture of experts, sequence parallelism);
:func:`layouts_weighed` lists it, the others a transformer layer of the plan takes in part (a plan
whose attention splits the sequence and whose MLPs split their weights: Llama 3 70B on 256 H100s,
context 4 on attention and tensor 4 on the MLPs, whose attention layout on every layer needs
116 GiB a device under Megatron-LM), and the most common layout's tensor x context ranks split
otherwise, for the caller to price (executor.session.export_nearest).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from costmodel.layer.candidates import divisors
from costmodel.parallel.axes import CONTEXT, EXPERT, TENSOR
from networks.analysis import block_of
from networks.ir import Network
from planner.export.file_states import FRAMEWORKS, Framework
from planner.export.megatron_layout import degree
from planner.plan.plan import Plan


@dataclass(frozen=True)
class Layout:
    """One transformer layer's layout: tensor, context and expert degrees, sequence parallelism."""

    tensor: int = 1
    context: int = 1
    expert: int = 1
    sequence_parallel: bool = False

    def __post_init__(self):
        # sequence parallelism splits what tensor parallelism replicates: off at tensor 1, as Megatron-LM turns it off
        object.__setattr__(self, "sequence_parallel", self.sequence_parallel and self.tensor > 1)

    def __str__(self) -> str:
        return (f"tensor {self.tensor}, context {self.context}, expert {self.expert}"
                + (" (sequence-parallel)" if self.sequence_parallel else ""))


def block_layouts(plan: Plan, net: Network) -> dict[str, Layout]:
    """Each transformer layer's layout as the plan splits it."""
    strategies = plan.strategies()
    out: dict[str, Layout] = {}
    for layer in net.layers:
        block = block_of(layer)
        if block is None:
            continue
        got, strategy = out.get(block, Layout()), strategies[layer.name]
        if layer.op == "attention":
            got = dataclasses.replace(got, tensor=degree(strategy, TENSOR), context=degree(strategy, CONTEXT))
        if layer.op == "moe":
            got = dataclasses.replace(got, expert=degree(strategy, EXPERT))
        if strategy.seq_scatter:
            got = dataclasses.replace(got, sequence_parallel=True)
        out[block] = got
    return out


def most_common_layout(plan: Plan, net: Network) -> tuple[Layout, int, int]:
    """The layout most transformer layers take (the first of them on a tie), how many take it, and
    how many there are."""
    layouts = block_layouts(plan, net)
    if not layouts:  # no transformer layers (a CNN): data parallelism
        return Layout(), 0, 0
    (layout, count), = Counter(layouts.values()).most_common(1)
    return layout, count, len(layouts)


@dataclass(frozen=True)
class Weighed:
    """A layout the nearest plan may run on every layer, and whose it is, in words (``that of 80 of
    the 80 transformer layers``)."""

    layout: Layout
    whose: str


#: the most layouts :func:`layouts_weighed` lists (each is priced: a pipelined 70B plan in about 0.4 s)
MOST_WEIGHED = 12
#: of them, the most that split the most common layout's model-parallel ranks otherwise (_split_otherwise)
MOST_SPLIT = 4


def layouts_weighed(plan: Plan, net: Network, framework: str) -> tuple[Weighed, ...]:
    """The layouts the nearest plan may take on every layer, the most common first (the default,
    :func:`nearest_plan`), then the others some layer takes in part: each pairing of a tensor
    degree that a transformer layer's layer or a layer outside them (the embedding, the LM head)
    takes with a context degree that a transformer layer's layer takes, with its expert degree, and
    with and without sequence parallelism where the framework leaves it to the user (Megatron-LM),
    most transformer layers first, at most :data:`MOST_WEIGHED`. A framework whose file states data
    parallelism only (DeepSpeed) weighs the most common alone."""
    most, count, blocks = most_common_layout(plan, net)
    first = Weighed(most, f"that of {count} of the {blocks} transformer layers")
    fw = FRAMEWORKS[framework]
    if not blocks or not fw.model_parallel:
        return (first,)
    strategies = plan.strategies()
    degrees: dict[str, tuple[set[int], set[int], list[bool]]] = {}
    outer: dict[int, str] = {}  # a tensor degree of a layer outside the transformer layers: the first such layer
    for layer in net.layers:
        block, strategy = block_of(layer), strategies[layer.name]
        if block is None:
            outer.setdefault(degree(strategy, TENSOR), layer.name)
            continue
        tensors, contexts, sp = degrees.setdefault(block, (set(), set(), [False]))
        tensors.add(degree(strategy, TENSOR))
        if not strategy.seq_scatter:  # a sequence-parallel layer's split of the sequence is no context
            contexts.add(degree(strategy, CONTEXT))
        sp[0] = sp[0] or strategy.seq_scatter  # its MLP's, where its attention runs tensor 1
    taken: Counter = Counter()
    for block, own in block_layouts(plan, net).items():
        tensors, contexts, sp = degrees[block]
        for t in tensors | set(outer):
            for c in contexts or {own.context}:
                if plan.stage_ranks % (t * c) == 0:
                    both = (sp[0], not sp[0]) if t > 1 and not fw.fsdp else (sp[0],)
                    taken.update({Layout(t, c, own.expert, with_sp): t in tensors for with_sp in both})
    others = sorted((layout for layout in taken if layout != most),
                    key=lambda x: (-taken[x], x.tensor, x.context, x.expert, not x.sequence_parallel))
    split = _split_otherwise(most, plan.stage_ranks, fw, set(taken) | {most})
    kept = others[:MOST_WEIGHED - 1 - len(split)] + split
    product = most.tensor * most.context
    return (first,) + tuple(Weighed(layout, f"one that {taken[layout]} of the {blocks} transformer layers take in part"
                                    if taken[layout] else f"tensor {layout.tensor} as {outer[layout.tensor]} takes it"
                                    if layout in taken else f"the most common layout's {product} ranks of tensor x "
                                    "context split otherwise")
                            for layout in kept)


def _split_otherwise(most: Layout, ranks: int, fw: Framework, weighed: set[Layout]) -> list[Layout]:
    """The layouts of ``most``'s tensor x context ranks split otherwise (tensor 4 as tensor 2 x
    context 2: a layout no layer need take, as fast where the sequence is long), the nearest split
    first, each sequence-parallel where it has tensor ranks (with and without on Megatron-LM), at
    most :data:`MOST_SPLIT`; none already ``weighed``."""
    product = most.tensor * most.context
    out = []
    for t in sorted(divisors(product), key=lambda t: (abs(t - most.tensor), t)):
        if (t, product // t) == (most.tensor, most.context) or ranks % product:
            continue
        both = (True,) if t > 1 and fw.fsdp else (True, False) if t > 1 else (False,)
        out += [layout for sp in both if (layout := Layout(t, product // t, most.expert, sp)) not in weighed]
    return out[:MOST_SPLIT]
