"""Plans for executor tests, built without the planner: a *family* gives each layer the first of a
list of candidate strategies that fits it (``check_fits``), falling back to data parallel and then
to full replication; the ``mixed`` family cycles through many strategies so consecutive layers
differ (reshards and halo exchanges between every pair)."""

from __future__ import annotations


from costmodel.calls.algorithms import algorithm_applies
from costmodel.parallel.shard import check_fits
from costmodel.parallel.strategy import Strategy, make_strategy
from networks.ir import Network
from networks.loader import load_network
from planner.plan.plan import LayerPlan, Plan

from tests.support.paths import ASSETS


def _two(p: int) -> int:
    return 2 if p % 2 == 0 and p > 1 else 1


def family_candidates(family: str, p: int) -> list[dict[str, int]]:
    a = _two(p)
    b = p // a
    fams = {
        "data": [{"N": p}],
        "spatial_h": [{"H": p}, {"N": p}],
        "spatial_hw": [{"H": a, "W": b}, {"H": p}, {"W": p}, {"N": p}],
        "filter": [{"F": p}, {"C": p}, {"N": p}],
        "channel": [{"C": p}, {"N": p}],
        "nf": [{"N": a, "F": b}, {"N": a, "C": b}, {"N": p}],
        "nh": [{"N": a, "H": b}, {"N": p}],
        "cf": [{"C": a, "F": b}, {"C": p}, {"N": p}],
        "replicated": [{"N": a}],  # R = p / a
    }
    return fams[family]


MIXED = ({"N": 4}, {"H": 4}, {"F": 4}, {"C": 2, "F": 2}, {"H": 2, "W": 2}, {"N": 2, "H": 2}, {"C": 4},
         {"W": 4}, {}, {"N": 2}, {"N": 2, "F": 2}, {"H": 2, "C": 2})


def _fits(layer, p: int, degrees: dict[str, int], batch: int) -> Strategy | None:
    try:
        s = make_strategy(p, degrees)
    except Exception:
        return None
    return None if check_fits(layer, s, batch) else s


def choose(layer, p: int, batch: int, cands, index: int = 0, cycle: bool = False) -> Strategy:
    order = list(cands[index % len(cands):]) + list(cands[:index % len(cands)]) if cycle else list(cands)
    for degrees in order + [{"N": p}, {}]:
        s = _fits(layer, p, degrees, batch)
        if s is not None:
            return s
    raise AssertionError("replication always fits")


def load(name: str) -> Network:
    path = ASSETS / f"{name}.yaml"
    return load_network(str(path) if path.exists() else name)


def make_plan(net: Network, batch: int, p: int, family: str, algo: str = "im2col") -> Plan:
    layers = []
    for i, layer in enumerate(net.layers):
        if family == "mixed":
            cands = [{d: min(k, p) for d, k in c.items()} for c in MIXED]
            s = choose(layer, p, batch, cands, i, cycle=True)
        else:
            s = choose(layer, p, batch, family_candidates(family, p))
        a = ""
        if layer.op == "conv2d":
            a = algo if algorithm_applies(layer, algo) else "im2col"
        layers.append(LayerPlan(layer.name, s, a))
    return Plan(network=net.name, network_name=net.name, network_hash=net.content_hash(), batch=batch,
                devices=p, machine="local", layers=tuple(layers))


def parse_case(text: str) -> tuple[str, int, str, str]:
    """``net:batch:family[:algo]`` -> (net, batch, family, algo)."""
    parts = text.split(":")
    return parts[0], int(parts[1]), parts[2], parts[3] if len(parts) > 3 else "im2col"
