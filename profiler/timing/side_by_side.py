"""Timing many kernel calls side by side: each call once per round, the rounds repeated
(``--refresh-profile``).

A shared machine's speed drifts within minutes. Timed one after another, each call's samples back
to back (on-demand profiling, :func:`profiler.timing.harness.time_call`), the calls that a plan's
alternatives are weighed on each see a different machine, and the drift can decide between two
alternatives (an example: docs/profiler.md, "Refreshing the cache"). Interleaved, every call's
median is taken over the same stretch of time, so a drift moves all the alternatives alike.

Each sample is the profiler's (:func:`profiler.timing.harness.cold_sampler`): the call runs once
untimed, as its previous sample would have, then a pass over a 4 MiB buffer, then ONE timed call.
With companions (a profile for P ranks), they run the same call meanwhile (profiler.timing.companions).
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.profile_table import Entry
from kernels.allocator import keep_freed_memory
from profiler.timing.harness import build, cold_sampler, summarize

ROUNDS = 5  # samples per call: the median of 5, as many as the quick policy mostly takes (3 to 7)
KEEP_BYTES = 1 << 30  # operands kept between rounds up to this many bytes (estimated by call.bytes)


def time_side_by_side(calls: Iterable[KernelCall], rounds: int = ROUNDS, companions=None,
                      keep_bytes: int = KEEP_BYTES,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Entry]:
    """Per call key, the entry (median and spread) of ``rounds`` samples taken one per round, every
    call once per round. ``companions`` (profiler.timing.companions.Companions): loaded with each call
    while it is sampled. ``progress(done, total)``: after each sample."""
    keep_freed_memory()
    todo = list(dict.fromkeys(calls))
    samples: dict[str, list[float]] = {c.key: [] for c in todo}
    kept: dict[str, tuple[Callable[[], object], Callable[[], float]]] = {}
    room = keep_bytes
    total, done = rounds * len(todo), 0
    try:
        for _ in range(rounds):
            for call in todo:
                pair = kept.get(call.key)
                if pair is None:
                    run = build(call, numpy)
                    pair = (run, cold_sampler(run))
                    if call.bytes <= room:
                        room -= call.bytes
                        kept[call.key] = pair
                run, sample = pair
                if companions is not None:
                    companions.load(call)
                run()
                samples[call.key].append(sample())
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        if companions is not None and todo:
            companions.pause()
    return {c.key: summarize(samples[c.key], c.flops, c.bytes) for c in todo}
