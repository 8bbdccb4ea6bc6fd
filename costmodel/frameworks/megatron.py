"""Megatron-LM's tensor parallelism as per-layer strategies (pure; docs/costmodel.md, "Tensor parallelism").

Shoeybi et al. 2019 (arXiv 1909.08053), section 3, split a transformer over a tensor group of ``t``
devices in pairs: a column-parallel layer (the MLP's first linear, attention's query/key/value by
heads) needs its input whole and leaves its output split over features, the pointwise ops after it
keep the split, and the row-parallel layer that follows (the MLP's second linear, attention's
output projection) contracts the split features and all-reduces its partial output. The embedding
and the LM head split the vocabulary, and the loss is computed on the vocabulary slices.

Here that is a layout of degrees for the existing layer model, so the layout algebra prices every
change between them: attention F=t (heads; its two projections are the column/row pair inside the
op), linear F=t (column) unless its input arrives split over features, then C=t (row), pointwise
ops on a feature-split input C=t (SwiGLU too: its input is the column-parallel gate and up, Megatron's
fused linear_fc1), embedding and loss C=t (vocabulary), a tied head F=t. The
remaining ops (layer norm, RMSNorm, dropout, residual add) run replicated over the tensor group or, with
``sequence_parallel`` (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.2), split over the
sequence (H=t); the tensor-parallel layers then take their sequence-parallel variant (``SP``:
``layer_layouts.sequence_scatter``), so a row-parallel output is reduce-scattered into the
sequence shards and a column-parallel input all-gathered from them, as Megatron-LM runs them.
``scatter=False`` keeps the all-reduce followed by a local slice (what the executor runs). All
layers split the batch over the ``p / t`` data-parallel replicas (N). Beside ``context``
parallelism (H = c) sequence parallelism runs inside each context rank, as Megatron-Core runs it:
the norms split the sequence ``H = c t`` and the tensor-parallel layers' collectives gather and
scatter the local ``S / c`` positions over the tensor group (``layer_layouts.sequence_scatter``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from costmodel.parallel.axes import CONTEXT, ESEQ, EXPERT, SP, TENSOR, C, E, F, H, N
from costmodel.parallel.shard import check_fits, dim_splits
from costmodel.parallel.strategy import Strategy, make_strategy
from costmodel.frameworks.uniform import Fallback, data_strategy
from networks.errors import DnnplanError
from networks.ir import Layer, Network
from networks.ops.catalogue import OPS
from networks.ops.pointwise import pointwise_splits, swiglu_splits

VOCABULARY_OPS = ("embedding", "softmax_cross_entropy")


def _wanted(layer: Layer, split_in: bool, sequence_parallel: bool) -> tuple[str | None, bool]:
    """(tensor dimension for this layer or None, whether its output is split over features)."""
    if layer.op in ("attention", "moe"):  # heads; experts' hidden width (expert tensor parallelism = tp)
        return F, False
    if layer.op == "linear":
        if dict(layer.params).get("tied_to"):
            return F, True
        return (C, False) if split_in else (F, True)
    if layer.op in VOCABULARY_OPS:
        return C, False
    if OPS[layer.op].splits in (pointwise_splits, swiglu_splits) and split_in:  # relu, gelu, dropout, add, swiglu
        return C, True
    return (H if sequence_parallel else None), False


def megatron_strategies(net: Network, p: int, batch: int, tensor: int,
                        sequence_parallel: bool = False, scatter: bool = True, context: int = 1,
                        expert: int = 1) -> tuple[dict[str, Strategy], list[Fallback]]:
    """Each layer's strategy under ``tensor``-way Megatron tensor parallelism, ``context``-way
    context parallelism (every layer with a sequence axis splits it, H; attention exchanges its keys
    and values) and ``p / (tensor context)``-way data parallelism, of which a mixture of experts
    splits its experts ``expert`` ways (E; Megatron-Core carves expert parallelism out of the data
    ranks); layers that cannot take theirs fall back to data parallelism (reported). With
    ``sequence_parallel`` and ``scatter`` the tensor-parallel layers that can take the
    sequence-parallel variant do."""
    data = _data_degree(p, tensor, context, expert, sequence_parallel)
    split_out: dict[str, bool] = {}
    out: dict[str, Strategy] = {}
    fallbacks: list[Fallback] = []
    for layer in net.layers:
        split_in = any(split_out.get(src, False) for src in layer.inputs)
        dim, splits_features = _wanted(layer, split_in, sequence_parallel)
        degrees = {N: data} if data > 1 else {}
        if dim and tensor > 1:
            degrees[dim] = tensor
        if context > 1 and H in dim_splits(layer):
            degrees[H] = context * degrees.get(H, 1)  # SP inside CP: the local sequence split t ways
        if expert > 1 and E in dim_splits(layer):
            want = _expert_strategy(layer, p, data, tensor, expert, degrees, batch)
            if want is not None:  # folded over the sequence-parallel tensor ranks too
                out[layer.name], split_out[layer.name] = want, False
                continue
            degrees |= {N: data // expert, E: expert}
        want = make_strategy(p, degrees)
        if sequence_parallel and scatter and dim in TENSOR.letters and tensor > 1:
            variant = replace(want, seq_scatter=True)
            want = variant if check_fits(layer, variant, batch) is None else want
        why = check_fits(layer, want, batch)
        if why is None:
            out[layer.name] = want
            split_out[layer.name] = splits_features and tensor > 1
            continue
        kept = _fewer_samples(layer, p, batch, want)  # its model-parallel split kept, over fewer data ranks
        out[layer.name] = kept if kept is not None else data_strategy(layer, p, batch)
        split_out[layer.name] = kept is not None and splits_features and tensor > 1
        fallbacks.append(Fallback(layer.name, want.label, out[layer.name].label, why))
    return out, fallbacks


def _fewer_samples(layer: Layer, p: int, batch: int, want: Strategy) -> Strategy | None:
    """``want`` with its sample split cut to what the micro-batch's ``batch`` samples divide, the
    rest of its ranks replicas, where it then fits (a micro-batch of 16 samples over 32 data ranks:
    N=16 beside the tensor split, not the tensor split dropped for N=16 x R=16); None otherwise."""
    degrees = dict(want.degrees)
    n = degrees.get(N, 1)
    fewer = math.gcd(n, batch)
    if fewer == n:
        return None
    kept = make_strategy(p, {**{d: k for d, k in degrees.items() if d != N}, **({N: fewer} if fewer > 1 else {}),
                             SP: int(want.seq_scatter), ESEQ: want.expert_seq})
    return kept if check_fits(layer, kept, batch) is None else None


def _expert_strategy(layer: Layer, p: int, data: int, tensor: int, expert: int, degrees: dict,
                     batch: int) -> Strategy | None:
    """A mixture of experts' strategy when expert parallelism spans the data x tensor ranks
    (``expert = data x tensor``, sequence parallelism on; Megatron-Core's MoE Parallel Folding with
    expert tensor parallelism 1, megatron/core/transformer/moe/README.md): the experts split over
    all of them, each rank routing its own sequence shard (``expert_seq = tensor``, as the
    sequence-parallel norms hold the tokens: no tensor-parallel collective around the layer);
    None where expert parallelism stays inside the data ranks."""
    if expert <= data:
        return None
    want = Strategy(p, make_strategy(p, {E: expert} | {d: k for d, k in degrees.items() if d == H}).degrees,
                    expert_seq=tensor)
    why = check_fits(layer, want, batch)
    if why:
        raise DnnplanError(f"{layer.name}: expert parallelism {expert} over {data} data x {tensor} tensor ranks: {why}",
                           hint=f"give {EXPERT.flag} a divisor of the data-parallel degree, or data x tensor with "
                                "--sequence-parallel")
    return want


def _data_degree(p: int, tensor: int, context: int, expert: int, sequence_parallel: bool) -> int:
    """The data-parallel degree the tensor and context degrees leave, checked (one line each)."""
    if tensor < 1 or p % tensor:
        raise DnnplanError(f"the tensor-parallel degree {tensor} does not divide {p} devices",
                           hint=f"give {TENSOR.flag} a divisor of --devices")
    if context < 1 or (p // tensor) % context:
        raise DnnplanError(f"the context-parallel degree {context} does not divide the {p // tensor} devices "
                           f"{TENSOR.flag} leaves", hint=f"give {CONTEXT.flag} a divisor of --devices / {TENSOR.flag}")
    data = p // (tensor * context)
    if sequence_parallel and tensor > 1 and expert == data * tensor:  # folded over data x tensor (_expert_strategy)
        return data
    if expert < 1 or data % expert:
        raise DnnplanError(f"the expert-parallel degree {expert} does not divide the data-parallel degree {data}",
                           hint=f"experts split over data-parallel ranks: give {EXPERT.flag} a divisor of "
                                f"--devices / ({TENSOR.flag} x {CONTEXT.flag}), or that times {TENSOR.flag} with "
                                "--sequence-parallel")
    return data
