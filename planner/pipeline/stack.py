"""A network as a uniform stack: layers before, ``n`` identical blocks, layers after (pure).

Transformers are stacks of one repeated block (``networks.analysis.block_of`` reads a layer's block
from its name). When every block has the same layers with the same signatures (op, parameters,
shapes) and each block reads only the block before it, a pipeline stage of ``k`` blocks costs the
same wherever it sits, which is what lets the pipeline search reuse stage solutions
(:mod:`planner.pipeline.stage_solver`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.step.pipeline import block_runs, stage_network
from networks.ir import Layer, Network
from planner.problem.build import signature

FIRST, MIDDLE, LAST, ONLY = "first", "middle", "last", "only"


def roles(stages: int) -> list[str]:
    """Each stage's role in a pipeline of ``stages`` (the only one, else first, middles, last)."""
    return [ONLY] if stages == 1 else [FIRST] + [MIDDLE] * (stages - 2) + [LAST]


@dataclass(frozen=True)
class Stack:
    network: Network
    before: tuple[Layer, ...]
    blocks: tuple[tuple[Layer, ...], ...]
    after: tuple[Layer, ...]

    @property
    def n(self) -> int:
        return len(self.blocks)

    def layers(self, start: int, k: int, role: str) -> list[Layer]:
        """Blocks ``start .. start + k - 1``, with the layers before the first block (role first or
        only) and after the last (last or only)."""
        out = [layer for block in self.blocks[start:start + k] for layer in block]
        if role in (FIRST, ONLY):
            out = list(self.before) + out
        if role in (LAST, ONLY):
            out = out + list(self.after)
        return out

    def stage(self, k: int, role: str) -> Network:
        """The canonical stage of ``k`` blocks in ``role`` as a network of its own (a middle stage
        holds blocks 1 .. k, reading block 0's output as its input)."""
        start = {FIRST: 0, ONLY: 0, MIDDLE: 1, LAST: self.n - k}[role]
        net, _ = stage_network(self.network, self.layers(start, k, role), 0)
        return net

    def device_layers(self, stages: int, chunks: int, s: int) -> list[Layer]:
        """Device ``s``'s layers under interleaving (``chunks`` model chunks a device, Megatron-LM's
        virtual stages): chunks ``s, s + S, ...`` of ``n / (S V)`` blocks each, in order, with the
        layers before the blocks on device 0 and those after on device ``S - 1``."""
        c = self.n // (stages * chunks)
        out = [layer for j in range(chunks) for block in self.blocks[(j * stages + s) * c:(j * stages + s + 1) * c]
               for layer in block]
        return (list(self.before) if s == 0 else []) + out + (list(self.after) if s == stages - 1 else [])

    def device_chunks(self, stages: int, chunks: int, s: int) -> tuple[int, ...]:
        """Each of :meth:`device_layers`' local chunk (the layers before the blocks in chunk 0, those
        after in chunk ``V - 1``)."""
        c = self.n // (stages * chunks)
        out = [j for j in range(chunks) for _ in range(c) for _ in self.blocks[0]]
        return tuple([0] * len(self.before) * (s == 0) + out + [chunks - 1] * len(self.after) * (s == stages - 1))

    def interleaved_stage(self, stages: int, chunks: int, role: str) -> Network:
        """The canonical device of ``role`` under interleaving as a network of its own (a middle
        device is device 1; each chunk after its first reads the chunk before it, on another device,
        as an input)."""
        s = {FIRST: 0, MIDDLE: 1, LAST: stages - 1}[role]
        net, _ = stage_network(self.network, self.device_layers(stages, chunks, s), 0)
        return net

    def boundary_bytes(self) -> int:
        """Bytes per sample one stage sends the next: a block's output (every cut is between blocks)."""
        _, received = stage_network(self.network, list(self.blocks[1]), 1)
        return received


def uniform_stack(net: Network) -> Stack | None:
    """``net`` as a uniform stack of at least two blocks, or None (module docstring)."""
    runs = block_runs(net)
    if runs is None:
        return None
    before, blocks, after = runs
    if len(blocks) < 2 or len({tuple(signature(layer) for layer in b) for b in blocks}) > 1:
        return None
    names = [{layer.name for layer in b} for b in blocks]
    for i, block in enumerate(blocks[1:], start=1):
        outside = {src for layer in block for src in layer.inputs} - names[i]
        if len(outside) != 1 or not outside <= names[i - 1]:
            return None  # a block must read exactly one tensor, from the block before it
    return Stack(net, tuple(before), tuple(tuple(b) for b in blocks), tuple(after))
