"""What to profile: the distinct local kernel calls of every strategy the planner may consider.

For each device count, every layer's strategies (the uniform ones: data, filter, channel, spatial;
then the candidates the planner weighs, ``costmodel.layer.candidates.candidate_strategies(layer, p,
batch)``), every convolution algorithm that applies, every pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from costmodel.layer.candidates import candidate_strategies
from costmodel.calls.algorithms import CONV_ALGORITHMS
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM, kernel_calls, PASSES, update_calls
from costmodel.calls.kernel_call import KernelCall, linear_call
from costmodel.parallel.shard import check_fits, local_layer
from costmodel.parallel.strategy import Strategy
from costmodel.frameworks.uniform import NAMED, data_strategy, wanted_strategy
from networks.ir import Layer, Network
from kernels.conv import conv_applicable


def _uniform(layer: Layer, p: int, batch: int) -> list[Strategy]:
    out = [data_strategy(layer, p, batch)]
    for spec in NAMED:
        s = wanted_strategy(spec, p)
        if check_fits(layer, s, batch) is None and s not in out:
            out.append(s)
    return out


def layer_strategies(layer: Layer, p: int, batch: int) -> list[Strategy]:
    """The uniform strategies for the layer, then the planner's candidates not among them."""
    out = _uniform(layer, p, batch)
    for s in candidate_strategies(layer, p, batch):
        if s not in out:
            out.append(s)
    return out


def conv_algorithms(layer: Layer) -> tuple[str, ...]:
    if layer.op != "conv2d":
        return ("",)
    p = layer.p
    kh, kw = p["kernel"]
    return tuple(a for a in CONV_ALGORITHMS
                 if conv_applicable(a, kh, kw, p["stride"], p["dilation"], p["groups"]))


def network_calls(net: Network, devices: Iterable[int], batch_of, algorithms: Iterable[str] | None = None,
                  attention: tuple[str, ...] = ("",)) -> list[KernelCall]:
    """Distinct kernel calls over every device count, layer, candidate strategy, algorithm and pass,
    in first-seen order. ``batch_of(p)`` gives the global batch for ``p`` devices; ``attention``
    the attention algorithms timed (a GPU's kernel set adds ``flash``, its fused attention)."""
    seen: dict[str, KernelCall] = {}
    wanted = set(algorithms) if algorithms is not None else None
    for p in devices:
        batch = batch_of(p)
        for layer in net.layers:
            for s in layer_strategies(layer, p, batch):
                local = local_layer(layer, s, batch)
                for call in update_calls(local):
                    seen.setdefault(call.key, call)
                for algo in (attention if layer.op == "attention" else conv_algorithms(layer)):
                    if wanted is not None and algo and layer.op == "conv2d" and algo not in wanted:
                        continue
                    for pass_ in PASSES:
                        for call in kernel_calls(local, pass_, algo):
                            seen.setdefault(call.key, call)
    return list(seen.values())


def gemm_grid(sizes: Iterable[int], dtype: str = "float32") -> list[KernelCall]:
    """GEMMs (m, k, n) over every combination of ``sizes`` (square and rectangular)."""
    item = 2 if dtype in ("float16", "bfloat16") else 8 if dtype == "float64" else 4
    sizes = sorted(set(sizes))
    out = []
    for m in sizes:
        for k in sizes:
            for n in sizes:
                call = linear_call("linear.fwd", m, k, n, False, dtype, item)
                out.append(call)
    return out


def conv_grid(batches: Iterable[int], channels: Iterable[int], spatial: Iterable[int], kernel: int = 3,
              algorithms: Iterable[str] = (DEFAULT_CONV_ALGORITHM,), passes: Iterable[str] = ("fwd",),
              dtype: str = "float32") -> list[KernelCall]:
    """Square convolutions, stride 1, 'same' padding, C = F, over every combination."""
    item = 2 if dtype in ("float16", "bfloat16") else 8 if dtype == "float64" else 4
    pad = kernel // 2
    out = []
    for n in batches:
        for c in channels:
            for h in spatial:
                macs = n * c * h * h * c * kernel * kernel
                nbytes = (2 * n * c * h * h + c * c * kernel * kernel) * item
                shape = (n, c, h, h, c, kernel, kernel, 1, 1, pad, pad, pad, pad, 1, 1, 1, 0)
                for algo in algorithms:
                    if not conv_applicable(algo, kernel, kernel, 1, 1, 1):
                        continue
                    for pass_ in passes:
                        out.append(KernelCall(f"conv2d.{pass_}", shape, dtype, algo, 2 * macs, nbytes))
    return out
