"""Uniform strategies: one strategy spec applied to every layer that can take it (pure).

``data`` (N=p), ``filter`` (F=p where an op has F, else data), ``spatial`` (H x W = p, as square
as possible, else data), or explicit degrees such as ``N=4,F=2``. A layer that cannot take the
spec falls back to data parallelism (or the largest sample split that fits, replicated over the
rest) and the fallback is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.parallel.axes import N, H, W, C, F
from costmodel.layer.candidates import divisors
from costmodel.parallel.shard import check_fits
from costmodel.parallel.strategy import Strategy, make_strategy, parse_degrees
from networks.errors import DnnplanError
from networks.ir import Layer, Network

NAMED = ("data", "filter", "channel", "spatial")


@dataclass(frozen=True)
class Fallback:
    layer: str
    wanted: str
    used: str
    reason: str


def _square_split(p: int) -> tuple[int, int]:
    """(h, w) with h * w = p, h >= w, as close to square as possible."""
    for a in divisors(p):
        if a >= p // a:
            return a, p // a
    return p, 1


def data_strategy(layer: Layer, p: int, batch: int) -> Strategy:
    """N=p if the batch allows, else the largest divisor of p that the batch allows (rest replicated)."""
    for k in reversed(divisors(p)):
        s = make_strategy(p, {N: k} if k > 1 else {})
        if check_fits(layer, s, batch) is None:
            return s
    return Strategy(p)


def wanted_strategy(spec: str, p: int) -> Strategy:
    if spec == "data":
        return make_strategy(p, {N: p})
    if spec == "filter":
        return make_strategy(p, {F: p})
    if spec == "channel":
        return make_strategy(p, {C: p})
    if spec == "spatial":
        h, w = _square_split(p)
        return make_strategy(p, {H: h, W: w})
    if "=" in spec:
        try:
            return parse_degrees(spec, p)
        except DnnplanError as err:  # named by the flag that gave it
            raise DnnplanError(f"--strategy {spec}: {err.bare}", hint=err.hint) from None
    raise DnnplanError(f"unknown strategy '{spec}'",
                       hint="use data, filter, channel, spatial, or degrees such as N=4,F=2")


def uniform_strategies(net: Network, p: int, batch: int, spec: str) -> tuple[dict[str, Strategy], list[Fallback]]:
    """Apply one spec to every layer; return the strategies and the layers that fell back."""
    want = wanted_strategy(spec, p)
    out: dict[str, Strategy] = {}
    fallbacks: list[Fallback] = []
    for layer in net.layers:
        why = check_fits(layer, want, batch)
        if why is None:
            out[layer.name] = want
            continue
        if want.seq_scatter and check_fits(layer, want.plain, batch) is None:  # SP where it applies
            out[layer.name] = want.plain
            continue
        if spec == "spatial":  # a spatial split that fits only along H (e.g. sequence models)
            alt = make_strategy(p, {H: p})
            if check_fits(layer, alt, batch) is None:
                out[layer.name] = alt
                continue
        used = data_strategy(layer, p, batch)
        out[layer.name] = used
        fallbacks.append(Fallback(layer.name, want.label, used.label, why))
    return out, fallbacks
