"""A plan's recomputation as Megatron-LM's (pure).

A plan records recomputation per layer (``+recompute`` in its algorithm:
:func:`costmodel.calls.algorithms.is_recomputed`); Megatron-LM recomputes by granularity
(Korthikanti et al. 2022): ``selective`` reruns attention's core, ``full`` whole transformer layers,
with ``--recompute-method uniform`` every layer (``--recompute-num-layers 1``) or ``block`` the first
``--recompute-num-layers`` of each pipeline chunk. So a plan is expressible when it recomputes the
attention layers and nothing else (selective, as :func:`costmodel.calls.algorithms.recompute_algorithms`
places it), or whole transformer layers, all of them or the same first few of each chunk (full);
anything else is refused naming the first layer out of the pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.calls.algorithms import is_recomputed
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Network
from planner.plan.plan import Plan

HINT = "Megatron-LM recomputes attention's core (selective) or whole transformer layers (full): re-plan with " \
       "--no-recompute, make the plan with `dnnplan predict --recompute selective|full --out FILE`, or export " \
       "with --nearest"


@dataclass(frozen=True)
class Recompute:
    """Megatron's recomputation: ``granularity`` ``""`` (none), ``selective`` or ``full``; with full,
    ``method`` ``uniform`` or ``block`` and the layers ``num_layers``."""

    granularity: str = ""
    method: str = ""
    num_layers: int = 0


def megatron_recompute(plan: Plan, net: Network, chunk_blocks: tuple[tuple[str, ...], ...],
                       hint: str = HINT) -> Recompute:
    """The plan's recomputation (module docstring); ``chunk_blocks``: the transformer layers of each
    pipeline chunk in order (one chunk without a pipeline); ``hint``: what a refusal tells the user
    (another framework that reads recomputation as Megatron-LM does names its own)."""
    algorithms = plan.algorithms()
    recomputed = [layer for layer in net.layers if is_recomputed(algorithms.get(layer.name, ""))]
    if not recomputed:
        return Recompute()
    if {layer.name for layer in recomputed} == {layer.name for layer in net.layers if layer.op == "attention"}:
        return Recompute("selective")
    layers_of: dict[str, list[str]] = {}
    for layer in net.layers:
        if block_of(layer) is not None:
            layers_of.setdefault(block_of(layer), []).append(layer.name)
    names = {layer.name for layer in recomputed}
    for layer in recomputed:
        if block_of(layer) is None:
            raise DnnplanError("recomputed outside every transformer layer", layer=layer.name, hint=hint)
        partial = [name for name in layers_of[block_of(layer)] if name not in names]
        if partial:
            raise DnnplanError(f"not recomputed while {layer.name} of its transformer layer is", layer=partial[0],
                               hint=hint)
    done = {block_of(layer) for layer in recomputed}
    whole = [[b in done for b in chunk] for chunk in chunk_blocks]
    if all(all(flags) for flags in whole):
        return Recompute("full", "uniform", 1)
    first = max(sum(flags) for flags in whole)
    for chunk, flags in zip(chunk_blocks, whole):
        want = [i < first for i in range(len(flags))]
        if flags != want:
            block = chunk[[a != b for a, b in zip(flags, want)].index(True)]
            raise DnnplanError(f"Megatron-LM's block recomputation takes the first {first} transformer layers of "
                               f"each pipeline chunk; transformer layer {block} breaks the pattern",
                               layer=layers_of[block][0], hint=hint)
    return Recompute("full", "block", first)
