"""The activations a pipeline device holds at its busiest moment, chunk by chunk (pure).

Under interleaved 1F1B (Narayanan et al., SC21, section 2.2.2) device ``s`` holds ``V`` model chunks
(``s, s + S, ...``) that need not keep the same activations: the last device's last chunk holds the
output layer and the loss (the logits, tokens x vocabulary), the first device's first chunk the
embedding. Megatron-Core's ``forward_backward_pipelining_with_interleaving``
(megatron/core/pipeline_parallel/schedules.py) runs on device ``s``, of ``m V`` chunk forwards and as
many backwards:

* forward ``k`` on local chunk ``(k // S) mod V``, backward ``k`` on chunk ``V - 1 - (k // S) mod V``
  (micro-batches in groups of ``S``, ``microbatch_group_size_per_vp_stage``);
* a warm-up of ``W = 2 (S - s - 1) + (V - 1) S`` forwards (all ``m V`` when ``m = S``, or when
  ``W`` reaches ``m V``), then one forward and one backward each step, then the remaining backwards.

A chunk's forward keeps its activations until that chunk's backward of the same micro-batch, so
after any prefix of that order chunk ``c`` has ``n_c`` = (its forwards so far) - (its backwards so
far) micro-batches in flight, and the device holds ``sum_c n_c a_c`` bytes of activations, ``a_c``
chunk ``c``'s activations of one micro-batch. :func:`in_flight` simulates the order and keeps the
count vectors after each forward (the holdings only grow by forwards); :func:`held_bytes` is the
largest ``sum_c n_c a_c`` over them. With equal chunks the total in flight is ``W + 1`` chunk
forwards all through the steady state, so the peak is ``(W + 1) / V`` micro-batches' worth, the
share rule of ``costmodel.step.pipeline.kept_micro_batches``; with unequal chunks the peak is where the
heavy chunks are in flight: the loss chunk of the last device runs its backward right after each
forward, so one micro-batch of it is held at a time (``m > S``), not ``((V - 1) S + 1) / V`` of the
average; the first device's first chunk has up to ``2 S`` in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


def warm_up(stages: int, s: int, m: int, chunks: int) -> int:
    """Megatron's warm-up forwards on device ``s`` (all ``m V`` when ``m = S`` or they reach it)."""
    total = m * chunks
    return total if m == stages else min(2 * (stages - s - 1) + (chunks - 1) * stages, total)


def order(stages: int, s: int, m: int, chunks: int) -> list[tuple[str, int]]:
    """Device ``s``'s passes in Megatron's order: ("F" | "B", local chunk) (module docstring)."""
    total, warm = m * chunks, warm_up(stages, s, m, chunks)

    def fwd(k: int) -> tuple[str, int]:
        return "F", (k // stages) % chunks

    def bwd(k: int) -> tuple[str, int]:
        return "B", chunks - 1 - (k // stages) % chunks

    out = [fwd(k) for k in range(warm)]
    for i in range(total - warm):
        out += [fwd(warm + i), bwd(i)]
    return out + [bwd(k) for k in range(total - warm, total)]


@lru_cache(maxsize=4096)
def in_flight(stages: int, s: int, m: int, chunks: int) -> tuple[tuple[int, ...], ...]:
    """The distinct per-chunk counts of micro-batches in flight after each forward of the order from
    the warm-up's end on (before it, each count only grows, so none is more)."""
    n, seen, forwards = [0] * chunks, {}, 0
    last = min(warm_up(stages, s, m, chunks), m * chunks - 1)  # the first forward not of the warm-up
    for kind, c in order(stages, s, m, chunks):
        n[c] += 1 if kind == "F" else -1
        if kind == "F":
            forwards += 1
            if forwards > last:
                seen.setdefault(tuple(n), None)
    return tuple(seen)


def held_at(counts, chunk_bytes) -> float:
    """What one moment holds: ``sum_c n_c a_c`` (``counts[c]`` = ``n_c``, ``chunk_bytes[c]`` = ``a_c``)."""
    return sum(n * a for n, a in zip(counts, chunk_bytes))


def held_bytes(stages: int, s: int, m: int, chunk_bytes: tuple[int, ...]) -> int:
    """The most activations device ``s`` holds at once: ``max over the order of sum_c n_c a_c``,
    ``chunk_bytes[c]`` = ``a_c``, local chunk ``c`` (global chunk ``s + c S``) at one micro-batch."""
    return max(held_at(counts, chunk_bytes) for counts in in_flight(stages, s, m, len(chunk_bytes)))


@dataclass(frozen=True)
class ChunkHold:
    """What one device holds chunk by chunk, as a planner's device solve counts it: the per-chunk
    micro-batches in flight at each moment of Megatron's order (:func:`in_flight`) and each of the
    device's layers' local chunk. A layer's activations of one micro-batch count ``v[chunk]`` times
    under a count vector ``v``; the device's peak is the most over its moments (:meth:`held`)."""

    counts: tuple[tuple[int, ...], ...]
    chunk_of: tuple[int, ...]  # each layer's local chunk, in the device's layer order

    def chunk_bytes(self, layer_bytes) -> tuple[float, ...]:
        """Each chunk's activations of one micro-batch from each layer's (``layer_bytes``)."""
        out = [0.0] * len(self.counts[0])
        for c, a in zip(self.chunk_of, layer_bytes, strict=True):
            out[c] += a
        return tuple(out)

    def held(self, layer_bytes) -> float:
        """The most activations the device holds at once, ``max_moments sum_c n_c a_c``."""
        per = self.chunk_bytes(layer_bytes)
        return max(held_at(v, per) for v in self.counts)

    def worst(self, layer_bytes) -> tuple[int, ...]:
        """The count vector of the moment the device holds the most (the first such moment)."""
        per = self.chunk_bytes(layer_bytes)
        return max(self.counts, key=lambda v: held_at(v, per))

    def most(self) -> tuple[int, ...]:
        """Each chunk's most micro-batches in flight over the order: a count no moment exceeds."""
        return tuple(max(v[c] for v in self.counts) for c in range(len(self.counts[0])))

    def per_layer(self, v) -> tuple[float, ...]:
        """Each layer's count under the chunk count vector ``v``."""
        return tuple(float(v[c]) for c in self.chunk_of)


def device_hold(stages: int, s: int, m: int, chunks: int, chunk_of: tuple[int, ...]) -> ChunkHold:
    """Device ``s``'s :class:`ChunkHold` (``chunk_of``: its layers' local chunks)."""
    return ChunkHold(in_flight(stages, s, m, chunks), tuple(chunk_of))
