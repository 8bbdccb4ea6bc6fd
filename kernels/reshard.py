"""Block copies of a reshard: the executor's local copy, packing and unpacking of the pieces the
layout algebra lists (``executor.comm.reshard.reshard``), timed by the profiler like any other kernel.

Both take views: ``dst`` a block of the array being written, ``src`` one of the array read. A
forward reshard copies; a backward one (halo gradients) adds into the producer's block.
Their cost depends on the contiguous run a piece has in its arrays as much as on its size (a
piece of a split-H block of width 2 copies 8 bytes at a time), which is why the cost model names
both (``costmodel.calls.layer_calls.reshard_copy_call``).
"""

from __future__ import annotations


def copy_block(dst, src) -> None:
    """``dst[...] = src`` (views of equal shape)."""
    dst[...] = src


def add_block(dst, src) -> None:
    """``dst += src`` (views of equal shape): gradient pieces summed on arrival."""
    dst += src
