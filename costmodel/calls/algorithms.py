"""The kernel algorithms a layer can run, and recomputation as a planned algorithm (pure).

A layer's plan names its kernel choice (a convolution's algorithm, attention's flash or
materialised kernels) apart from whether it is recomputed: ``flash+recompute`` runs FlashAttention
and recomputes the layer, ``recompute`` alone the layer's default kernels (Megatron-Core keeps
``AttnBackend`` apart from ``recompute_granularity`` likewise)."""

from __future__ import annotations

from typing import Mapping

from costmodel.calls.attention import ATTENTION_ALGORITHMS
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import prod
from networks.ops.catalogue import OPS


CONV_ALGORITHMS = ("direct", "im2col", "fft", "winograd")


#: A layer that keeps none of its internals for backward and runs its forward again there instead
#: (activation recomputation; Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016;
#: per layer, as Korthikanti et al. 2022 recompute attention). Planned like an algorithm: a plan's
#: ``algorithm`` is the kernel choice, ``+recompute`` after it when recomputed (``flash+recompute``),
#: or ``recompute`` alone with the layer's default kernels (Megatron-Core keeps ``AttnBackend`` apart
#: from ``recompute_granularity`` likewise).
RECOMPUTE = "recompute"


def is_recomputed(algorithm: str) -> bool:
    """Whether a planned algorithm recomputes the layer (:data:`RECOMPUTE`)."""
    return algorithm == RECOMPUTE or algorithm.endswith("+" + RECOMPUTE)


def with_recompute(kernel: str) -> str:
    """The planned algorithm that runs ``kernel`` ("" for the default) and recomputes the layer."""
    return f"{kernel}+{RECOMPUTE}" if kernel else RECOMPUTE


def attention_default(machine) -> str:
    """The attention algorithm a machine runs unless a plan names another: FlashAttention-2 where the
    device runs it (``DeviceSpec.flash``: GPUs from Ampere on), else the materialised kernels."""
    return "flash" if machine.device.flash else "materialized"


def resolve_algorithm(layer, algorithm: str, machine) -> str:
    """``algorithm`` with an attention layer's kernel made explicit (``""`` -> the machine's
    :func:`attention_default`, ``recompute`` -> it with ``+recompute``); checks that the machine runs
    the kernel named. Other layers' algorithms come back unchanged."""
    if layer.op != "attention":
        return algorithm
    kernel = kernel_algorithm(algorithm) or attention_default(machine)
    if kernel not in ATTENTION_ALGORITHMS:
        raise DnnplanError(f"unknown attention algorithm '{kernel}'", layer=layer.name,
                           hint=f"use {' or '.join(ATTENTION_ALGORITHMS)}")
    if kernel == "flash" and not machine.device.flash:
        raise DnnplanError(f"flash attention does not run on {machine.device.name} (machine '{machine.name}')",
                           layer=layer.name, hint="use materialized, or a GPU machine that runs FlashAttention")
    return with_recompute(kernel) if is_recomputed(algorithm) else kernel


def default_algorithms(net: Network) -> dict[str, str]:
    """:data:`DEFAULT_CONV_ALGORITHM` for every convolution of ``net`` (layer name -> algorithm)."""
    return {layer.name: DEFAULT_CONV_ALGORITHM for layer in net.layers if layer.op == "conv2d"}


RECOMPUTE_MODES = ("none", "selective", "full")


def recompute_algorithms(net: Network, mode: str, attention: str = "") -> dict[str, str]:
    """:func:`default_algorithms` with :data:`RECOMPUTE` where ``mode`` puts it: ``selective``, on
    the attention layers (Korthikanti et al. 2022 recompute attention's core only; rerunning the
    whole op, projections included, prices more than they do); ``full``, on every layer inside a
    repeated block (Megatron's full recomputation checkpoints each transformer layer's input), or
    on every layer but the convolutions and the loss when the network has no blocks. ``attention``:
    the attention layers' algorithm ("" for the machine's default; ``materialized`` as the 2021-22
    Megatron-LM runs had it)."""
    if mode not in RECOMPUTE_MODES:
        raise DnnplanError(f"unknown recomputation '{mode}'", hint="use " + ", ".join(RECOMPUTE_MODES))
    if attention not in ("", *ATTENTION_ALGORITHMS):
        raise DnnplanError(f"unknown attention algorithm '{attention}'", hint=f"use {' or '.join(ATTENTION_ALGORITHMS)}")
    out = default_algorithms(net) | {layer.name: attention for layer in net.layers
                                     if layer.op == "attention" and attention}
    blocked = any(block_of(layer) for layer in net.layers)
    for layer in net.layers:
        if layer.op in ("conv2d", "softmax_cross_entropy"):
            continue
        if (mode == "selective" and layer.op == "attention") or \
                (mode == "full" and (block_of(layer) or not blocked)):
            out[layer.name] = with_recompute(out.get(layer.name, ""))
    return out


#: Recomputation is weighed only for layers whose internals are at least this fraction of their
#: output (a norm's statistics are not worth a candidate; a dropout mask, at a quarter, is)
RECOMPUTE_MIN_SAVING = 0.125


def recompute_applies(layer) -> bool:
    """Whether recomputing ``layer`` saves memory worth weighing: it keeps internals of its own for
    backward (``LayerCost.activation_bytes``: attention's q, k, v and probabilities, dropout's mask,
    max pooling's indices, the loss's log-probabilities) of at least :data:`RECOMPUTE_MIN_SAVING`
    of its output."""
    if layer.op == "conv2d":
        return False
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    internals = OPS[layer.op].costs(layer.p, layer.in_shapes, layer.out_shape, 1, itemsize).activation_bytes
    return internals > 0 and internals >= RECOMPUTE_MIN_SAVING * prod(layer.out_shape) * itemsize


def resolve_algorithms(net: Network, algorithms: Mapping[str, str], machine) -> dict[str, str]:
    """A plan's algorithms with every attention layer's kernel made explicit (:func:`resolve_algorithm`)."""
    out = dict(algorithms)
    for layer in net.layers:
        if layer.op == "attention":
            out[layer.name] = resolve_algorithm(layer, out.get(layer.name, ""), machine)
    return out


def kernel_algorithm(algorithm: str) -> str:
    """The kernels' algorithm of a planned one: recomputation runs the layer's ordinary kernels."""
    if algorithm == RECOMPUTE:
        return ""
    return algorithm[:-len(RECOMPUTE) - 1] if is_recomputed(algorithm) else algorithm


def recomputed_comms(comms) -> list:
    """The collectives (``costmodel.layer.comms.Comm``) a layer under ``RECOMPUTE`` runs again: its forward
    runs again in backward, collectives included (ZeRO-3's parameter gather excepted: the
    backward's own gather serves it)."""
    return [c.in_phase("bwd") for c in comms if c.phase == "fwd" and c.purpose != "param_gather"]


def algorithm_applies(layer, algorithm: str) -> bool:
    """Whether a convolution algorithm can run this layer (the kernels' own applicability rule), or
    ``RECOMPUTE`` can apply to it."""
    if is_recomputed(algorithm):
        return recompute_applies(layer) and algorithm_applies(layer, kernel_algorithm(algorithm))
    if layer.op == "attention":
        return algorithm in ("", *ATTENTION_ALGORITHMS)
    if layer.op != "conv2d":
        return algorithm == ""
    p = layer.p
    if algorithm in ("direct", "im2col"):
        return True
    if algorithm == "winograd":
        return p["kernel"] == (3, 3) and p["stride"] == (1, 1) and p["dilation"] == (1, 1) and p["groups"] == 1
    if algorithm == "fft":
        return p["stride"] == (1, 1) and p["dilation"] == (1, 1) and p["groups"] == 1
    return False
