"""A plan's layout by parallel axis, as frameworks name them (pure).

The planner chooses a strategy per layer (``costmodel.parallel.strategy``: degrees of N, E, H, W, C, F over
the layer's ranks, named in ``costmodel.parallel.axes``) and an algorithm per layer; a user reads a layout as Megatron-Core's flags name
it. Each axis is the set of degrees its layers take:

- **data** N (a mixture-of-experts layer's tokens lie over N times E: its E is carved out of the
  data-parallel ranks, ``Strategy.tokens``);
- **expert** E, on the mixture-of-experts layers;
- **context** H on the layers of a sequence (a network with attention: the sequence split,
  Megatron-Core's context parallelism), else **spatial** H and W (an image's rows and columns);
- **tensor** C and F (Megatron-LM's row- and column-parallel splits), and how many layers take the
  sequence-parallel variant;
- **pipeline** stages, schedule (1F1B, GPipe, interleaved with its chunks a device), and the
  micro-batches (with one stage: gradient accumulation);
- **ZeRO** stage (``--zero``, or the planner's own choice when nothing fits without it);
- **replicated**: the ranks a layer's degrees leave over (R), which repeat its work;
- **recomputation** (layers that recompute their forward in backward) and **attention** algorithm
  (flash or materialised, per layer).
"""

from __future__ import annotations

from costmodel.calls.algorithms import is_recomputed
from costmodel.parallel.axes import LAYER_AXES, TENSOR, axes_of
from costmodel.parallel.strategy import Strategy
from networks.ir import Network
from planner.plan.plan import Plan

def axes(layers: list[tuple[str, Strategy, str]], sequence: bool) -> dict:
    """``layers``: (op, strategy, algorithm) of every layer; ``sequence``: the network's H is a
    sequence (it has attention). Returns each axis's degrees (> 1) with how many layers take each
    (an axis's degree differs by layer, and two axes may split different layers), and the counts
    of the per-layer choices."""
    out: dict = {}
    for axis in axes_of(sequence):
        counts: dict[int, int] = {}
        for _, strategy, _ in layers:
            k = 1
            for d in axis.letters:
                k *= strategy.degree(d)
            if k > 1:
                counts[k] = counts.get(k, 0) + 1
        out[axis.name] = dict(sorted(counts.items()))
    replicated: dict[int, int] = {}  # ranks repeating a layer's work (R: the degrees leave them over)
    for _, strategy, _ in layers:
        if (r := strategy.degree("R")) > 1:
            replicated[r] = replicated.get(r, 0) + 1
    out["replicated"] = dict(sorted(replicated.items()))
    out["sequence_parallel_layers"] = sum(s.seq_scatter for _, s, _ in layers)
    out["recomputed_layers"] = sum(is_recomputed(a) for _, _, a in layers if a)
    attention = [a.split("+")[0] for op, _, a in layers if op == "attention"]
    out["attention"] = {k: attention.count(k) for k in sorted(set(attention)) if k}
    return out


def axes_line(found: dict, pipeline: str = "", zero: int = 0) -> str:
    """The axes in one line, each degree with the layers taking it, the layers whose tensor split
    scatters the sequence after the tensor degrees (counted once over them): ``axes (layers): data 32
    (256), context 2 (247), tensor 2 (9), sequence-parallel 9; ...``."""
    parts = []
    for axis in LAYER_AXES:
        for k, n in (found.get(axis.name) or {}).items():
            parts.append(f"{axis.name} {k} ({n})")
        if axis is TENSOR and found.get("sequence_parallel_layers"):
            parts.append(f"sequence-parallel {found['sequence_parallel_layers']}")
    # ranks the degrees leave over repeat a layer's work (a device count the batch and the model
    # dimensions do not divide): said, as the time those devices add nothing to
    parts += [f"replicated {k} ({n})" for k, n in (found.get("replicated") or {}).items()]
    line = ", ".join(parts) or "every layer whole on each device (replicated)"
    extra = [pipeline] if pipeline else []
    extra.append(f"ZeRO-{zero}" if zero else "no ZeRO")
    again = found.get("recomputed_layers")
    extra.append(f"recomputation on {again} layer{'s' if again != 1 else ''}" if again else "no recomputation")
    if found.get("attention"):
        extra.append("attention " + ", ".join(f"{k} x{v}" for k, v in found["attention"].items()))
    return "axes (degree, layers): " + line + "; " + "; ".join(extra)


def plan_axes(net: Network, plan: Plan, got=None) -> dict:
    """A plan's layout by axis (:func:`axes`): its layers', or under a pipeline (``got``: the pipeline
    search's choice) each stage's solution's layers."""
    ops = {layer.name: layer.op for layer in net.layers}
    if got is not None:
        layers = [(layer.op, sol.strategies[layer.name], sol.algorithms.get(layer.name, ""))
                  for sol in got.solutions for layer in sol.network.layers]
    else:
        layers = [(ops[lp.name], lp.strategy, lp.algorithm) for lp in plan.layers]
    return axes(layers, "attention" in ops.values())
