"""The one layout Megatron-LM runs, read off a plan's per-layer strategies (pure).

Megatron-LM gives every layer the same tensor, context and expert degrees (Shoeybi et al. 2019;
Megatron-Core's ``RankGenerator``), and cuts whole transformer layers into pipeline stages. A plan
chooses a strategy per layer; it is Megatron's when every layer takes the strategy that
:func:`costmodel.frameworks.megatron.megatron_strategies` gives it under the degrees the plan's first
attention layer splits (:mod:`costmodel.parallel.axes` names them). What is not, is refused in one
line naming the first layer that differs and how: a network Megatron's GPT model cannot hold (a
convolution), a sequence the context and sequence parallelism cannot split as the framework
splits it (:func:`megatron_sequence_splits`), a per-layer hybrid (a layer whose tensor degree
differs), a stage cut inside a transformer layer, a pipeline schedule Megatron lacks (GPipe), a
micro-batch the data-parallel ranks cannot share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from costmodel.frameworks.megatron import megatron_strategies
from costmodel.parallel.axes import CONTEXT, EXPERT, TENSOR, axes_of
from costmodel.parallel.strategy import Strategy
from costmodel.step.pipeline import INTERLEAVED, cut_at
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Layer, Network
from planner.plan.plan import Plan

#: the ops of Megatron-LM's GPT model (pretrain_gpt.py): the embedding, transformer layers of norms,
#: attention, MLP or mixture of experts, dropout and residual adds, the final norm, head and loss
GPT_OPS = frozenset({"embedding", "layernorm", "rmsnorm", "attention", "dropout", "add", "linear", "gelu", "swiglu",
                     "moe", "softmax_cross_entropy"})
#: the pipeline schedules Megatron-LM runs: 1F1B, and its interleaved 1F1B with model chunks
MEGATRON_SCHEDULES = ("1f1b", INTERLEAVED)


#: what a framework requires of the sequence length under tensor ``t``, context ``c`` and sequence
#: parallelism ``sp``: (the divisor, how it is formed from the degrees, why), one a requirement
SequenceSplits = Callable[[int, int, bool], tuple[tuple[int, str, str], ...]]


def megatron_sequence_splits(tensor: int, context: int, sequence_parallel: bool) -> tuple[tuple[int, str, str], ...]:
    """Megatron-LM's requirements of ``--seq-length``, read in NVIDIA/Megatron-LM at commit
    d98e8a64ddf34856e74b24714e3bedb2f5a39553: context parallelism splits each sequence into 2 x CP
    chunks, rank r holding chunks r and 2 CP - 1 - r for load balance under the causal mask
    (megatron/core/utils.py ``_get_batch_on_this_cp_rank_per_sequence_balancing``), and
    ``validate_args`` asserts "seq-length should be a multiple of 2 * context-parallel-size"
    (megatron/training/arguments.py, lines 1335-1338); sequence parallelism scatters a context rank's
    S / CP positions over the tensor ranks (megatron/core/models/common/embeddings/
    language_model_embedding.py, lines 143-146), and ``_split_along_first_dim`` and
    ``_reduce_scatter_along_first_dim`` assert "First dimension of the tensor should be divisible by
    tensor parallel size" (megatron/core/tensor_parallel/mappings.py, lines 72-74 and 176-178)."""
    out = []
    if context > 1:
        out.append((2 * context, "2 x context", f"context {context} splits a sequence into 2 x {context} chunks "
                                                "(Megatron-Core's load balance)"))
    if sequence_parallel and tensor > 1:
        out.append((context * tensor, "context x tensor",
                    f"sequence parallelism splits a context rank's positions over tensor {tensor}"))
    return tuple(out)


@dataclass(frozen=True)
class Target:
    """A framework that runs one layout on every layer, as its refusals name it: ``name``, its
    transformer model (``model``: what a layer must belong to), the pipeline schedules it runs and
    what it requires of the sequence length (``sequence_splits``)."""

    name: str
    model: str
    schedules: tuple[str, ...]
    sequence_splits: SequenceSplits = megatron_sequence_splits


#: Megatron-LM's pretrain_gpt.py and its GPT model
MEGATRON = Target("Megatron-LM", "Megatron-LM's GPT model", MEGATRON_SCHEDULES)


def sequence_length(net: Network) -> int:
    """The positions of a sequence: the first attention layer's input's."""
    return next(layer for layer in net.layers if layer.op == "attention").in_shapes[0][-2]


def check_sequence(net: Network, target: Target, tensor: int, context: int, sequence_parallel: bool) -> None:
    """One line naming the first attention layer where ``target`` cannot split ``net``'s sequence under
    these degrees (:attr:`Target.sequence_splits`)."""
    seq = sequence_length(net)
    for divisor, formed, why in target.sequence_splits(tensor, context, sequence_parallel):
        if seq % divisor:
            raise DnnplanError(f"{why}: {seq} positions are not a multiple of {formed} = {divisor}",
                               layer=next(layer.name for layer in net.layers if layer.op == "attention"),
                               hint=f"re-plan with sizes whose {formed} divides {seq}, or --seq a multiple of "
                                    f"{divisor}")


@dataclass(frozen=True)
class MegatronLayout:
    """A plan's layout as Megatron-LM's degrees: tensor, context and expert (``expert_folded``: the
    experts split over data x tensor ranks, Megatron-Core's expert tensor-parallel degree 1), the
    sequence-parallel variant, the data-parallel degree, the pipeline's stages and model chunks a
    device, and the transformer layers of each chunk in layer order."""

    tensor: int
    context: int
    expert: int
    expert_folded: bool
    sequence_parallel: bool
    data: int
    stages: int
    chunks: int
    chunk_blocks: tuple[tuple[str, ...], ...]
    micro_batch_size: int
    global_batch_size: int

    @property
    def blocks_per_chunk(self) -> tuple[int, ...]:
        return tuple(len(blocks) for blocks in self.chunk_blocks)

    @property
    def even(self) -> bool:
        """Megatron's default cut: every chunk holds as many transformer layers."""
        return len(set(self.blocks_per_chunk)) == 1


def degree(strategy: Strategy, axis) -> int:
    out = 1
    for letter in axis.letters:
        out *= strategy.degree(letter)
    return out


def gpt_layers(net: Network, target: Target = MEGATRON) -> list[Layer]:
    """``net``'s layers, refused unless the target's transformer model holds each (one line naming the
    first that it does not) and the network has attention."""
    for layer in net.layers:
        if layer.op not in GPT_OPS:
            raise DnnplanError(f"{layer.op} is not a layer of {target.model} ({target.name} trains transformers)",
                               layer=layer.name, hint="export a transformer's plan")
    if not any(layer.op == "attention" for layer in net.layers):
        raise DnnplanError(f"{net.name} has no attention layer: {target.model} is a transformer",
                           layer=net.layers[0].name, hint="export a transformer's plan")
    inside = [i for i, layer in enumerate(net.layers) if block_of(layer) is not None]
    for layer in net.layers[inside[0]:inside[-1]] if inside else ():
        if block_of(layer) is None:
            raise DnnplanError(f"lies between transformer layers, where {target.model} holds none",
                               layer=layer.name)
    return list(net.layers)


def megatron_layout(plan: Plan, net: Network, target: Target = MEGATRON) -> MegatronLayout:
    """The plan's Megatron layout (module docstring), or one line naming the layer ``target`` (Megatron-LM,
    or another framework that runs Megatron's layout) cannot run."""
    layers = gpt_layers(net, target)
    strategies = plan.strategies()
    attention = next(layer for layer in layers if layer.op == "attention")
    tensor, context = degree(strategies[attention.name], TENSOR), degree(strategies[attention.name], CONTEXT)
    experts = [degree(strategies[layer.name], EXPERT) for layer in layers if layer.op == "moe"]
    expert = max(experts, default=1)
    sequence_parallel = any(s.seq_scatter for s in strategies.values())
    # the sequence split over the tensor ranks too (a norm's context degree context x tensor), even where a
    # sequence that does not split left the plan's tensor-parallel layers without their sequence-parallel variant
    split = tensor > 1 and any(degree(s, CONTEXT) == context * tensor for s in strategies.values())
    check_sequence(net, target, tensor, context, sequence_parallel or split)
    ranks, micro = plan.stage_ranks, plan.micro_batch
    try:
        want, _ = megatron_strategies(net, ranks, micro, tensor, sequence_parallel=sequence_parallel,
                                      context=context, expert=expert)
    except DnnplanError as err:
        raise DnnplanError(err.bare, layer=attention.name, hint=err.hint) from None
    for layer in layers:
        got = strategies[layer.name]
        if got != want[layer.name]:
            raise DnnplanError(f"split {got.label}, where {target.name}'s layout of tensor {tensor}, context "
                               f"{context}, expert {expert} splits it {want[layer.name].label}"
                               f"{_differences(got, want[layer.name])}", layer=layer.name,
                               hint=f"{target.name} runs one layout on every layer: export with --nearest (the "
                                    "closest plan it runs, with both predictions), or a plan of one layout: `dnnplan "
                                    "predict NET --tensor T [--context C] [--expert E] --out FILE` (without a "
                                    "pipeline: predict --out writes none)")
    data = ranks // (tensor * context)
    if micro % data:
        raise DnnplanError(f"a micro-batch of {micro} samples does not split over {data} data-parallel ranks",
                           layer=attention.name, hint=micro_hint(plan.batch, plan.batch // micro, data,
                                                                 "data-parallel ranks"))
    stages, chunks, blocks = _pipeline(plan, net, target)
    return MegatronLayout(tensor, context, expert, expert > data, sequence_parallel, data, stages, chunks, blocks,
                          micro // data, plan.batch)


def _differences(got: Strategy, want: Strategy) -> str:
    """`` (tensor 4, not 2)``: the axes whose degree differs, by the names users read (a transformer's:
    its sequence split is context, not also spatial)."""
    out = [f"{axis.name} {degree(got, axis)}, not {degree(want, axis)}" for axis in axes_of(sequence=True)
           if degree(got, axis) != degree(want, axis)]
    return f" ({'; '.join(out)})" if out else ""


def _pipeline(plan: Plan, net: Network, target: Target) -> tuple[int, int, tuple[tuple[str, ...], ...]]:
    """(stages, model chunks a device, transformer layers in each chunk), the cut checked: whole
    transformer layers in each chunk, the layers before the first in the first chunk and those after
    the last in the last (:func:`gpt_layers` has refused any between them); a schedule ``target`` runs."""
    pipe = plan.pipeline
    if pipe is None:
        return 1, 1, (blocks_of(net.layers),)
    if pipe.schedule not in target.schedules:
        raise DnnplanError(f"{target.name} has no {pipe.schedule} pipeline schedule (it runs "
                           f"{' and '.join(target.schedules)})", layer=pipe.first_layers[0],
                           hint="re-plan with --schedule 1f1b")
    chunks = cut_at(net, pipe.first_layers)
    seen: set[str] = set()
    for i, chunk in enumerate(chunks):
        if block_of(chunk[0]) in seen:
            raise DnnplanError(f"pipeline chunk {i + 1} starts inside transformer layer {block_of(chunk[0])}: "
                               f"{target.name} cuts stages between whole transformer layers", layer=chunk[0].name,
                               hint="re-plan, or edit the plan's pipeline first_layers to open transformer layers")
        for layer in chunk:
            if block_of(layer) is not None:
                seen.add(block_of(layer))
            elif i != (len(chunks) - 1 if seen else 0):
                raise DnnplanError(f"in pipeline chunk {i + 1}: {target.name} holds the embedding in the first chunk "
                                   "and the final norm, head and loss in the last", layer=layer.name)
    return pipe.stages, pipe.chunks, tuple(blocks_of(chunk) for chunk in chunks)


def blocks_of(layers: list[Layer]) -> tuple[str, ...]:
    """The transformer layers (repeated blocks) among ``layers``, in order."""
    return tuple(dict.fromkeys(b for b in map(block_of, layers) if b is not None))

def micro_hint(batch: int, micro_batches: int, ranks: int, what: str = "devices") -> str:
    """How to re-plan where a micro-batch does not split over the ``ranks`` a framework's data
    parallelism takes it over: a batch not a multiple of them, or too many micro-batches of it."""
    if batch % ranks:
        return f"re-plan with a batch a multiple of the {ranks} {what}"
    return (f"the plan accumulates {micro_batches} micro-batches of {batch // micro_batches}: re-plan in at most "
            f"{batch // ranks} (`dnnplan plan NETWORK ... --pipeline 1 --micro-batches K --out PLAN.yaml`, "
            f"{batch} / K a multiple of {ranks})")
